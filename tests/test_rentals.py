"""The one writer (`engine/rentals.py`): an update changes the rental, writes its ledger event
and its log line together, and counts the record's version up; an illegal move changes no
phase and is written down as an error."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from rentwatch.core.lifecycle import Phase
from rentwatch.core.preflight.verdict import Verdict
from rentwatch.engine.attempt import Attempt
from rentwatch.engine.journal import Journal
from rentwatch.engine.rentals import apply
from rentwatch.engine.updates import CameUp, GaveUp, Listed, Lost, Set, Verified
from rentwatch.ledger import Ledger


def _world(tmp_path):
    ledger = Ledger(tmp_path / "l.duckdb")
    lines: list[str] = []
    clock = SimpleNamespace(now=lambda: 50.0)
    journal = Journal(ledger, "c", clock, log=lines.append)  # type: ignore[arg-type]
    return ledger, journal, lines, Attempt(7, None, 70, 1, "RTX 4090", 0.0, 0.3, 0.01)


def test_an_update_changes_the_rental_and_writes_its_event_and_line(tmp_path):
    ledger, journal, lines, a = _world(tmp_path)
    first = a.life
    assert apply(journal, Listed(a, 10.0)) and apply(journal, CameUp(a, 20.0))
    assert a.life.phase == Phase.RUNNING and a.running_at == 20.0
    assert first.phase == Phase.REQUESTED and first.version == 0  # the old version stands
    assert apply(journal, Verified(a, 30.0, "rule:verify", "matmul checked", True, {}))
    assert a.life.proven and a.life.phase == Phase.VERIFIED and a.verified_at == 30.0
    apply(journal, Lost(a, 40.0, "the market says it no longer exists"))
    kinds = [(e.kind, e.detail.get("by_preflight")) for e in ledger.instance_history(7)]
    assert kinds == [("preflight_passed", True), ("lost", None)]
    assert lines == [
        "verify i:7 m:70 RTX 4090: matmul checked",
        "lost   i:7 m:70: the market says it no longer exists",
    ]
    # every update is one version more, whether it moved the phase or not
    before = a.life.version
    apply(journal, Set(a, {"verdict": Verdict(True, None, "ok", 70.0, 71.0)}))
    assert a.life.version == before + 1 and a.verdict is not None


def test_an_illegal_move_changes_no_phase_and_is_written_down(tmp_path):
    ledger, journal, lines, a = _world(tmp_path)
    apply(journal, Listed(a, 10.0))
    apply(journal, CameUp(a, 20.0))
    apply(journal, Verified(a, 30.0, "rule:verify", "ok", True, {}))
    # a verified rental is never given up (automation may stop it, never destroy it)
    assert not apply(journal, GaveUp(a, 40.0, "rule:x", "planted", "timeout"))
    assert a.life.phase == Phase.VERIFIED
    assert a.life.refused[-1].after == Phase.ABANDONED
    errors = [e for e in ledger.instance_history(7) if e.kind == "error"]
    assert len(errors) == 1 and errors[0].detail == {
        "before": "verified",
        "after": "abandoned",
        "why": "planted",
    }
    assert "error  i:7 refused verified -> abandoned: planted" in lines


def test_a_field_set_is_checked_against_the_rentals_fields(tmp_path):
    """`Set` changes what it names and bumps the version; it never moves the lifecycle or the
    billing marks (only the updates named for an event do), nor sets what a rental lacks."""
    _, journal, _, a = _world(tmp_path)
    before = a.life.version
    assert apply(journal, Set(a, {"ssh_error": "no port yet", "look_wanted": True}))
    assert a.ssh_error == "no port yet" and a.look_wanted and a.life.version == before + 1
    for fields in ({"life": a.life}, {"marks": []}, {"instance_id": 8}, {"no_such": 1}):
        with pytest.raises(ValueError, match="not set by name"):
            apply(journal, Set(a, {"ssh_error": None, **fields}))
    # refused whole: nothing of it set
    assert a.ssh_error == "no port yet" and a.instance_id == 7 and a.life.version == before + 1
