"""A read-only copy of a ledger another process holds open for writing (DuckDB lets no other
process open it then, not even to read): its file and write-ahead log copied now, the copy
opened read-only and removed after."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .store import Ledger, LedgerError

TRIES = 5


def _stamp(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


@contextlib.contextmanager
def snapshot(path: Path) -> Iterator[Ledger]:
    """The ledger at `path` as it stands now. Between checkpoints only its log changes, by
    growing, and a copy of a growing log is an earlier moment of it (DuckDB drops a torn last
    record); a checkpoint rewrites the file itself, so a copy it overlapped is taken again."""
    wal = path.with_name(path.name + ".wal")
    with tempfile.TemporaryDirectory(prefix="rentwatch-ledger-") as tmp:  # 0700: the user's
        copy = Path(tmp) / path.name
        for _ in range(TRIES):
            before = _stamp(path)
            shutil.copyfile(path, copy)
            with contextlib.suppress(FileNotFoundError):  # none, or folded in just now
                shutil.copyfile(wal, copy.with_name(copy.name + ".wal"))
            if _stamp(path) == before:
                break
        else:
            raise LedgerError(f"{path} was rewritten while it was copied, {TRIES} times")
        ledger = Ledger(copy, read_only=True)
        try:
            yield ledger
        finally:
            ledger.close()
