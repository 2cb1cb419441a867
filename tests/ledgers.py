"""A test's own new ledger where the test keeps no file: a copy of one blank ledger file made once
per process, then opened as an existing ledger. A new ledger (a file or `:memory:`) binds every
view, about five times the CPU of opening one whose views are this rentwatch's
(`python -m bench.ledger_open`). The folders go when the process ends."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from rentwatch.ledger import Ledger

_ROOT = Path(tempfile.mkdtemp(prefix="rentwatch-test-ledgers-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)
_BLANK = _ROOT / "blank.duckdb"


def new_ledger() -> Ledger:
    if not _BLANK.exists():
        Ledger(_BLANK).close()  # DuckDB checkpoints the file as it closes
    path = Path(tempfile.mkdtemp(dir=_ROOT)) / "ledger.duckdb"
    shutil.copyfile(_BLANK, path)
    return Ledger(path)
