"""The release does not depend on the disk (issue 45): a ledger that cannot be written ("No
space left on device") stops the campaign safely. Everything held is released first, the
reason is printed, and the events the disk refused wait in memory, go to the ledger when a
write goes through again, or to a file beside it, which the next open adds back."""

from __future__ import annotations

import asyncio
import errno
import json

from rentwatch.core.policy import get_policy
from rentwatch.ledger import Ledger
from rentwatch.ledger.fallback import fallback_path
from rentwatch.market.factory import load_campaign
from rentwatch.run.host import run_headless

from .campaigns import campaign_text

FULL = OSError(errno.ENOSPC, "No space left on device")


def _full_after(monkeypatch, ready) -> dict[str, int]:
    """Every event insert fails once `ready(row)` has been true for one (the disk fills)."""
    real = Ledger._insert
    state = {"full": 0, "refused": 0}

    def insert(self, row):
        if state["full"]:
            state["refused"] += 1
            raise FULL
        real(self, row)
        if ready(row):
            state["full"] = 1

    monkeypatch.setattr(Ledger, "_insert", insert)
    return state


def test_events_the_disk_refused_are_written_in_order_when_it_takes_them_again(
    tmp_path, monkeypatch
):
    path = tmp_path / "l.duckdb"
    state = _full_after(monkeypatch, lambda row: row[12] == "campaign_start")
    led = Ledger(path)
    led.record("campaign_start", at=1.0, actor="engine", reason="go", campaign="c")
    seq = led.intent("stop", at=2.0, actor="trap", reason="release", campaign="c", instance_id=7)
    assert led.unwritable and "No space left" in led.unwritable
    led.outcome(seq, at=3.0, ok=True)  # its intent is known, though not on disk yet
    assert state["refused"] >= 2
    state["full"] = 0  # room again
    led.record("note", at=4.0, actor="engine", reason="after", campaign="c")
    kinds = [(e.seq, e.kind, e.phase) for e in led.events()]
    assert kinds == [
        (1, "campaign_start", "fact"),
        (2, "stop", "intent"),
        (3, "stop", "outcome"),
        (4, "note", "fact"),
    ]
    led.close()
    assert not fallback_path(path).exists()


def test_a_full_disk_stops_the_campaign_safely_and_keeps_its_events(
    make_sim, tmp_path, monkeypatch, capsys
):
    """The disk fills once the campaign has rentals booting: the engine does not die on the
    failed write; the next poll stops the campaign, the trap releases every rental, the reason
    is printed, the events go to the file beside the ledger, and the next open adds them
    back and says so."""
    sim = make_sim(seed=7, offers=40, time_scale=120, host_class=[{"behaviour": "healthy",
                                                                   "share": 1.0}])  # fmt: skip
    ledger = tmp_path / "l.duckdb"
    state = _full_after(monkeypatch, lambda row: row[12] == "create" and row[13] == "outcome")
    campaign = load_campaign(campaign_text("disk", 2))
    code = asyncio.run(
        run_headless(
            campaign, get_policy("default"), sim.url, sim.api_key, str(ledger),
            key_path=str(tmp_path / "key"),
        )
    )  # fmt: skip
    out = capsys.readouterr()
    assert state["refused"] > 0
    assert code == 1, out.out[-2000:] + out.err
    assert "the ledger cannot be written" in out.err and "No space left on device" in out.err
    t = sim.call(sim.market.truth)
    assert t["instances"], "nothing was rented before the disk filled"
    billing = [
        r for r in t["instances"] if r["destroyed_at"] is None and r["actual_status"] != "stopped"
    ]
    assert billing == [], out.out[-3000:]
    spill = fallback_path(ledger)
    lines = [json.loads(x) for x in spill.read_text().splitlines()]
    assert any(d["kind"] == "trap" for d in lines)
    assert any(d["kind"] == "destroy" and d["actor"] == "trap" for d in lines)
    assert str(spill) in out.err
    monkeypatch.undo()  # the disk has room again
    with Ledger(ledger) as led:  # the next open adds them back, in order, and says so
        assert led.fallback_note and "added back" in led.fallback_note
        assert led.events(where="kind = 'trap'")
        seqs = [e.seq for e in led.events()]
        assert seqs == sorted(seqs) == list(range(1, len(seqs) + 1))
    assert not spill.exists()
