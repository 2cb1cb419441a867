"""Where running controllers announce themselves for `ls`, `attach` and `ledger`: a JSON file per
controller in the user's runtime dir, removed on a clean exit, swept when its process is gone.

`RENTWATCH_RUNTIME_DIR` must be the user's own and writable by nobody else: in a shared one
another user planted an entry pointing at their own socket. Entries and sockets not the user's
are skipped, and a socket's peer is checked (`SO_PEERCRED`, where there is one)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import struct
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...core.errors import RentwatchError
from ...core.records import record

# sun_path is 108 bytes on Linux (104 on macOS), the terminating NUL included
MAX_SOCKET_PATH = 100


class UnsafeRuntimeDir(RentwatchError):
    """A runtime directory another user owns or may write: its entries could be anyone's."""

    title = "runtime directory"


def unsafe_dir(path: Path) -> str | None:
    """Why `path` may not hold the registry: not a directory, another's, or writable by others."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"can be written by others (mode {stat.S_IMODE(st.st_mode):o}; chmod 700 it)"
    return None


@dataclass(frozen=True)
class Entry:
    campaign: str
    pid: int
    socket: str
    ledger: str
    started_at: float  # wall clock, for uptime
    url: str | None = None  # http://HOST:PORT when --listen tcp: was given
    token_file: str | None = None
    # a demo's built-in simulated market, for `offers`, `plan` and `reconcile --market-url`;
    # its key in a 0600 file, never in the entry, a log or the ledger
    market_url: str | None = None
    market_key_file: str | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def runtime_dir() -> Path:
    """The directory that holds the registry (created 0700)."""
    forced = os.environ.get("RENTWATCH_RUNTIME_DIR")
    candidates: list[Path] = []
    if forced:
        candidates.append(Path(forced))
    else:
        from platformdirs import user_data_dir, user_runtime_dir

        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            candidates.append(Path(user_runtime_dir("rentwatch")))
        candidates.append(Path(user_data_dir("rentwatch")) / "run")
    refused = []
    for path in candidates:
        try:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:
            continue
        why = unsafe_dir(path)
        if why is not None:
            refused.append(f"{path} {why}")
            continue
        if os.access(path, os.W_OK):
            return path
    if refused:
        hint = " (RENTWATCH_RUNTIME_DIR)" if forced else ""
        raise UnsafeRuntimeDir(f"refusing the runtime directory{hint}: {'; '.join(refused)}")
    raise OSError(f"no writable runtime directory among {', '.join(map(str, candidates))}")


def _entries_dir() -> Path:
    d = runtime_dir() / "controllers"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    why = unsafe_dir(d)
    if why is not None:
        raise UnsafeRuntimeDir(f"refusing {d}: it {why}")
    return d


def _mine(path: Path, kind: int) -> bool:
    """A file of this kind (regular, socket) that is the user's own; a link is no file."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.getuid()


def peer_uid(s: socket.socket) -> int | None:
    """The uid of the process at the other end of a connected Unix socket (Linux)."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    with contextlib.suppress(OSError):
        _, uid, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i")))
        return int(uid)
    return None


def socket_path_for(ledger: Path) -> Path:
    """Next to the ledger, unless that path is too long for a Unix socket: then the runtime dir."""
    beside = ledger.resolve().with_name(ledger.name + ".sock")
    if len(str(beside)) <= MAX_SOCKET_PATH:
        return beside
    return runtime_dir() / f"c{os.getpid()}.sock"


def write_private(path: Path, text: str) -> None:
    """`text` in a file created afresh 0600 at `path` (a token, a key, an entry)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def register(entry: Entry) -> Path:
    path = _entries_dir() / f"{entry.pid}.json"
    tmp = path.with_suffix(".tmp")
    write_private(tmp, json.dumps(entry.as_json()))
    os.replace(tmp, path)  # readers never see half a file
    return path


def unregister(pid: int) -> None:
    with contextlib.suppress(OSError):
        (_entries_dir() / f"{pid}.json").unlink()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process with that pid: alive, not ours to judge
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that has exited but not been reaped (a killed controller whose parent, or an
    init that does not reap, has not collected it) still answers signal 0: it is dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # no /proc (macOS): trust the signal
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def socket_answers(path: str, timeout: float = 1.0, mine: bool = False) -> bool:
    """Whether something accepts connections on the Unix socket at `path`; with `mine`, only
    a socket the user owns, served by a process running as the user."""
    if mine and not _mine(Path(path), stat.S_IFSOCK):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(path)
        except OSError:
            return False
        uid = peer_uid(s) if mine else None
    return uid is None or uid == os.getuid()


def live_entries() -> list[Entry]:
    """The controllers still running; entries whose process died are swept on the way."""
    out = []
    for f in sorted(_entries_dir().glob("*.json")):
        if not _mine(f, stat.S_IFREG):
            continue  # another user's file (or a link): neither listed nor deleted
        try:
            data = json.loads(f.read_text())
            entry = record(Entry, data)
        except (OSError, ValueError, TypeError):
            continue  # half-written or foreign: not ours to delete either
        if not isinstance(entry.pid, int) or not isinstance(entry.socket, str):
            continue
        # a pid can be reused after kill -9: the socket must answer too
        if pid_alive(entry.pid) and socket_answers(entry.socket, mine=True):
            out.append(entry)
        elif not pid_alive(entry.pid):
            with contextlib.suppress(OSError):
                f.unlink()
    return out


def find(
    socket_path: str | None = None,
    campaign: str | None = None,
    ledger: str | Path | None = None,
    pid: int | None = None,
    quiet: bool = False,
) -> list[Entry]:
    """Running controllers matching every criterion given; with `quiet`, none where there is no
    runtime directory to read (OSError: no controller could have registered)."""
    try:
        found = live_entries()
    except OSError:
        if not quiet:
            raise
        found = []
    if pid is not None:
        found = [e for e in found if e.pid == pid]
    if socket_path:
        want = str(Path(socket_path).resolve())
        found = [e for e in found if str(Path(e.socket).resolve()) == want]
    if campaign:
        found = [e for e in found if e.campaign == campaign]
    if ledger:
        want_l = str(Path(ledger).resolve())
        found = [e for e in found if str(Path(e.ledger).resolve()) == want_l]
    return found
