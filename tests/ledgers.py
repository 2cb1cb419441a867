"""A test's own new ledger where the test keeps no file: a file in a folder of its own, copied
from the process's blank ledger (`rentwatch.ledger.blank`) and opened in about a third of the
CPU of a `:memory:` one, whose every view is bound again. The folders go when the process ends."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from rentwatch.ledger import Ledger

_ROOT = Path(tempfile.mkdtemp(prefix="rentwatch-test-ledgers-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


def new_ledger() -> Ledger:
    return Ledger(Path(tempfile.mkdtemp(dir=_ROOT)) / "ledger.duckdb")
