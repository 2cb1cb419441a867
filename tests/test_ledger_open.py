"""Opening a ledger makes its views only when the file's are not this rentwatch's: a fresh file,
one an older rentwatch (or a hand) changed. Making them binds each view, a tenth of a second at
every open otherwise. A process makes them in its first new file only; each later new file is a
copy of that one as it was made (blank.py)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import duckdb
import pytest
from rentwatch.ledger import Ledger, blank, store

from .test_poll_ledger_work import CountingCon


@pytest.fixture
def opened(monkeypatch):
    """The statements each ledger opened here ran on its connection; the first new file opened
    here makes its schema, as the first of a process does."""
    monkeypatch.setattr(blank, "_blank", None)
    monkeypatch.setattr(blank, "_asked", 0)
    cons: list[CountingCon] = []
    connect = store.connect_sandboxed

    def counting(path, *, read_only):
        cons.append(CountingCon(connect(path, read_only=read_only)))
        return cons[-1]

    monkeypatch.setattr(store, "connect_sandboxed", counting)
    return cons


def _views_made(con: CountingCon) -> bool:
    return any("CREATE OR REPLACE" in s and "VIEW" in s for s in con.statements)


def _a_ledger(path):
    with Ledger(path) as led:
        s = led.intent("create", at=0, actor="rule:replace", reason="r", campaign="c", gpu_dph=0.2)
        led.outcome(s, at=0, ok=True, instance_id=1)
        led.record("note", at=3600, actor="engine", reason="clock", campaign="c")


def test_views_are_made_once_and_read_from_the_file_after(tmp_path, opened):
    path = tmp_path / "l.duckdb"
    _a_ledger(path)
    assert _views_made(opened[0])
    with Ledger(path) as led:
        [r] = led.receipt("c")
    with Ledger(path, read_only=True) as led:
        [r_ro] = led.receipt("c")
    assert not _views_made(opened[1]) and not _views_made(opened[2])
    assert r["creates"] == r_ro["creates"] == 1
    assert r["total_usd"] == r_ro["total_usd"] == pytest.approx(0.2)


@pytest.mark.parametrize("read_only", [False, True], ids=["writer", "read-only"])
def test_views_a_hand_changed_are_made_again(tmp_path, opened, read_only):
    path = tmp_path / "l.duckdb"
    _a_ledger(path)
    con = duckdb.connect(str(path))  # an older rentwatch's receipt, or an operator's
    con.execute("CREATE OR REPLACE VIEW receipt AS SELECT 'c' AS campaign, 42 AS creates")
    con.close()
    with Ledger(path, read_only=read_only) as led:
        [r] = led.receipt("c")
    assert _views_made(opened[-1])
    assert r["creates"] == 1 and r["total_usd"] == pytest.approx(0.2)


def _views(path) -> list[tuple[str, str]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY view_name"
        ).fetchall()
    finally:
        con.close()


def test_new_files_after_the_first_are_copies_of_the_blank_and_private(tmp_path, opened):
    first, second, third = (tmp_path / f"{n}.duckdb" for n in ("first", "second", "third"))
    _a_ledger(first)
    _a_ledger(second)  # the blank is made (in a folder of its own), then copied here
    _a_ledger(third)
    made = [_views_made(con) for con in opened]
    assert made == [True, True, False, False]
    assert _views(second) == _views(third) == _views(first) and len(_views(first)) >= 19
    for path in (second, third):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with Ledger(path, read_only=True) as led:
            assert [e.seq for e in led.events()] == [1, 2, 3]
            [r] = led.receipt("c")
        assert r["creates"] == 1 and r["total_usd"] == pytest.approx(0.2)


def test_a_copied_ledger_refuses_a_second_writer(tmp_path, opened):
    """The blank is never read from a file this process holds: closing any descriptor of it would
    drop DuckDB's lock, and a second process could open the ledger for writing."""
    Ledger(tmp_path / "first.duckdb").close()
    path = tmp_path / "copy.duckdb"
    with Ledger(path) as led:
        led.record("note", at=1, actor="engine", reason="held")
        assert not _views_made(opened[-1])
        second = subprocess.run(
            [sys.executable, "-c", _SECOND_WRITER, str(path)], capture_output=True, text=True
        )
    assert second.stdout.strip() == "refused", second.stdout + second.stderr


_SECOND_WRITER = """
import sys
from rentwatch.ledger import Ledger, LedgerError
from rentwatch.ledger.store import HELD_ELSEWHERE
try:
    Ledger(sys.argv[1]).close()
except LedgerError as exc:
    print("refused" if HELD_ELSEWHERE in str(exc) else exc)
else:
    print("opened")
"""


def test_the_blank_is_never_laid_over_a_name_that_exists(tmp_path, opened):
    _a_ledger(tmp_path / "first.duckdb")
    _a_ledger(tmp_path / "second.duckdb")  # the blank is made
    (tmp_path / "elsewhere").write_text("not a ledger")
    link = tmp_path / "link.duckdb"
    link.symlink_to(tmp_path / "elsewhere")
    assert not blank.lay_blank(link, pytest.fail)
    assert (tmp_path / "elsewhere").read_text() == "not a ledger"
    stray = tmp_path / "stray.duckdb"
    stray.with_name("stray.duckdb.wal").write_bytes(b"")
    assert not blank.lay_blank(stray, pytest.fail) and not stray.exists()
