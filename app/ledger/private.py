"""Files only their owner may read: the ledger and its write-ahead log, exports. DuckDB creates the
WAL again after every checkpoint, so while a writer is open the umask takes away every bit for
group and others; the last writer to close gives the old one back."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

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
    """The ledger file and its WAL made 0600 where they exist and are ours."""
    for p in (path, path.with_name(path.name + ".wal")):
        with contextlib.suppress(OSError):
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
                os.chmod(p, 0o600)


@contextlib.contextmanager
def private_replacement(target: Path) -> Iterator[BinaryIO]:
    """An open file to write the export to, renamed over `target` on success, removed on failure. A
    symlink, or anything but a regular file, at `target` is refused.

    It is created exclusively (O_EXCL, O_NOFOLLOW, 0600) in a 0700 directory of our own beside
    `target`, and everything after goes through descriptors, so in a shared folder another user
    who swaps a name cannot make the export follow or become their symlink."""
    shown = clean(str(target), 300)
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(target)
        if stat.S_ISLNK(st.st_mode):
            raise RentwatchError(f"cannot export to {shown}: it is a symlink (not followed)")
        if not stat.S_ISREG(st.st_mode):
            raise RentwatchError(f"cannot export to {shown}: not a regular file")
    try:
        parent = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise RentwatchError(f"cannot write {shown}: {exc.strerror or exc}") from None
    try:
        room = _private_room(target, parent, shown)
        try:
            yield from _write_then_rename(target.name, parent, room, shown)
        finally:
            os.close(room[1])
            with contextlib.suppress(OSError):
                os.rmdir(room[0], dir_fd=parent)  # only ever empty; a stranger's is not ours
    finally:
        os.close(parent)


_PART = "export.part"


def _private_room(target: Path, parent: int, shown: str) -> tuple[str, int]:
    """A fresh 0700 directory beside `target`: its name and a descriptor on it, refused unless
    the descriptor is on a directory of ours that no one else may enter."""
    try:
        path = tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent)
        name = os.path.basename(path)
        fd = os.open(
            name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
        )
    except OSError as exc:
        raise RentwatchError(f"cannot write {shown}: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        os.close(fd)
        raise RentwatchError(f"cannot write {shown}: its private folder was swapped")
    return name, fd


def _write_then_rename(
    name: str, parent: int, room: tuple[str, int], shown: str
) -> Iterator[BinaryIO]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(_PART, flags, 0o600, dir_fd=room[1])
    except OSError as exc:
        raise RentwatchError(f"cannot write {shown}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        # a rename: it replaces whatever the name now holds, never follows it
        os.rename(_PART, name, src_dir_fd=room[1], dst_dir_fd=parent)
    except OSError as exc:
        raise RentwatchError(f"cannot write {shown}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(_PART, dir_fd=room[1])
