"""Files only their owner may read: the ledger and its write-ahead log, exports.

The ledger says what an account ran and spent, and a job's `run` text (issue 30, item 8: a
live `.wal` was 0644 because the umask was set only around the first connect, and DuckDB
creates the WAL again after every checkpoint). So while a writer is open, the process's umask
takes away every bit for group and others; the last writer to close gives the old one back.
An export goes to a file created exclusively, 0600, beside its target, then renamed over it:
a symlink planted at the target's path is refused, and never followed (item 9).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from ..core.errors import RentwatchError
from ..core.text import clean

PRIVATE_UMASK = 0o077
_lock = threading.Lock()
_holders = 0
_saved: int | None = None


def hold_private_umask() -> None:
    """Files this process creates from now on are its owner's only (until the last release)."""
    global _holders, _saved
    with _lock:
        # asserted on every hold, not only the first: the umask is the whole process's, and
        # anything may have loosened it since an earlier writer opened
        current = os.umask(PRIVATE_UMASK)
        os.umask(current | PRIVATE_UMASK)
        if _holders == 0:
            _saved = current
        _holders += 1


def release_private_umask() -> None:
    global _holders, _saved
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0 and _saved is not None:
            os.umask(_saved)
            _saved = None


def make_private(path: Path) -> None:
    """The ledger file and the WAL beside it made 0600, where they exist and are ours (a
    ledger made by an older rentwatch, a WAL left by a crash)."""
    for p in (path, path.with_name(path.name + ".wal")):
        with contextlib.suppress(OSError):
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
                os.chmod(p, 0o600)


@contextlib.contextmanager
def private_replacement(target: Path) -> Iterator[Path]:
    """A new file beside `target` (created exclusively, 0600) to write the export to; on
    success it is renamed over `target`, on failure removed. A symlink, or anything but a
    regular file, at `target` is refused: another user may have planted it there."""
    shown = clean(str(target), 300)
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(target)
        if stat.S_ISLNK(st.st_mode):
            raise RentwatchError(f"cannot export to {shown}: it is a symlink (not followed)")
        if not stat.S_ISREG(st.st_mode):
            raise RentwatchError(f"cannot export to {shown}: not a regular file")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    except OSError as exc:
        raise RentwatchError(f"cannot write {shown}: {exc.strerror or exc}") from None
    os.close(fd)
    part = Path(tmp)
    try:
        yield part
        os.chmod(part, 0o600)  # whatever wrote it (DuckDB's COPY) may have made it anew
        os.replace(part, target)  # a rename: it replaces a path, never follows one
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()
        raise
