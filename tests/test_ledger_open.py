"""Opening a ledger makes its views only when the file's are not this rentwatch's: a fresh file,
one an older rentwatch (or a hand) changed. Making them binds each view, a tenth of a second at
every open otherwise."""

from __future__ import annotations

import duckdb
import pytest
from rentwatch.ledger import Ledger, store

from .test_poll_ledger_work import CountingCon


@pytest.fixture
def opened(monkeypatch):
    """The statements each ledger opened here ran on its connection."""
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
