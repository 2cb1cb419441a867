"""The blank ledger: a new ledger's file (its tables, meta and views, no event), made once per
process, so that each new ledger after the first is a copy of it. Making a ledger binds every
view (about 0.15 s of CPU); copying the file and opening it costs a third of that."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from ..core.errors import RentwatchError

_lock = threading.Lock()
_blank: bytes | None = None
_asked = 0  # new ledgers this process made, or asked the blank for
_inside = threading.local()  # `making`: this thread makes the blank now (its ledger is no copy)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _is_absent(path: Path) -> bool:
    """Nothing at `path`, neither the file (nor a link) nor its WAL: a ledger made there is new."""
    return not any(os.path.lexists(p) for p in (path, path.with_name(path.name + ".wal")))


def _made(make: Callable[[Path], None]) -> bytes | None:
    """`make` run on a path in a folder of its own, closed there, then read: never a file a
    connection of this process holds, since closing any descriptor of a file drops the process's
    POSIX locks on it, and with them DuckDB's refusal of a second writer."""
    _inside.making = True
    try:
        with tempfile.TemporaryDirectory(prefix="rentwatch-blank-") as folder:
            path = Path(folder) / "blank.duckdb"
            make(path)
            return path.read_bytes()
    except (OSError, RentwatchError):  # no blank: each new ledger is made where it goes
        return None
    finally:
        _inside.making = False


def lay_blank(path: Path, make: Callable[[Path], None]) -> bool:
    """Write the blank at `path` where nothing is there, neither the file nor its WAL; whether it
    did. A process's first new ledger is made where it goes (one that makes a single ledger pays
    nothing more); the second has `make` make the blank. The file is created exclusively and never
    through a link, so a name that appears meanwhile is not written over; where the copy cannot
    be written (a full disk, a folder that refuses it) nothing is left, and the ledger is made as
    without a blank, with its own error."""
    global _blank, _asked
    if getattr(_inside, "making", False) or not _is_absent(path):
        return False
    with _lock:
        _asked += 1
        if _blank is None and _asked == 2:
            _blank = _made(make)
        blank = _blank
    if blank is None:
        return False
    try:
        fd = os.open(path, _NEW_FILE, 0o600)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blank)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return False
    return True
