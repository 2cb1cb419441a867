"""Our record of machines and models is kept between two events the ledger writes: asked again
with nothing written, it costs no query (the swap watch and the ranking ask it every market
minute); after any event it is read afresh; a ledger another process writes is read each time."""

from __future__ import annotations

import random

import pytest
from rentwatch.ledger import Ledger

# the record reads over the `instances` and `hosts` views, which define them
from bench.ledger_open import VIEW_RENTALS, VIEW_SPEEDS

from .ledgers import new_ledger

REF = "RTX 4090"


def _dud(led: Ledger, iid: int, life_s: float) -> None:
    s = led.intent(
        "create", at=0, actor="rule:t", reason="r", campaign="c", gpu_name=REF, machine_id=iid
    )
    led.outcome(s, at=0, ok=True, instance_id=iid)
    led.record("abandon", at=life_s, actor="rule:t", reason="x", instance_id=iid, detail={})
    s = led.intent("destroy", at=life_s, actor="rule:t", reason="x", instance_id=iid)
    led.outcome(s, at=life_s, ok=True)


def _counting(led: Ledger) -> list[str]:
    asked: list[str] = []
    rows = led._rows

    def counted(sql, params=()):  # type: ignore[no-untyped-def]
        asked.append(sql)
        return rows(sql, params)

    led._rows = counted  # type: ignore[method-assign]
    return asked


@pytest.mark.parametrize("read", ["machine_speeds", "rentals"])
def test_a_record_read_twice_with_nothing_written_is_one_query(read):
    led = new_ledger()
    _dud(led, 1, 600)
    asked = _counting(led)
    first = getattr(led, read)()
    second = getattr(led, read)()
    assert second == first and len(asked) == 1
    led.close()


def test_an_event_written_since_is_in_the_next_read(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    _dud(led, 1, 600)
    assert [(r.machine_id, r.dud, r.lifetime_min) for r in led.rentals()] == [(1, True, 10.0)]
    assert led.machine_speeds() == {}
    _dud(led, 2, 1200)
    assert sorted((r.machine_id, r.dud, r.lifetime_min) for r in led.rentals()) == [
        (1, True, 10.0),
        (2, True, 20.0),
    ]
    _delivered(led, 3, 2000, [{"ok": True, "job": "a", "work_ref_h": 0.5, "speed_share": 0.8}])
    assert led.machine_speeds() == {3: pytest.approx(0.8)}
    led.close()


def test_a_callers_change_to_a_record_never_reaches_the_next_caller():
    led = new_ledger()
    _dud(led, 1, 600)
    led.machine_speeds()[1] = 2.0
    led.rentals().clear()
    assert [r.machine_id for r in led.rentals()] == [1] and led.machine_speeds() == {}
    led.close()


def test_a_ledger_another_process_writes_is_read_at_every_ask(tmp_path):
    path = tmp_path / "l.duckdb"
    led = Ledger(path)
    _dud(led, 1, 600)
    led.close()
    ro = Ledger(path, read_only=True)
    asked = _counting(ro)
    ro.rentals()
    ro.rentals()
    assert len(asked) == 2
    ro.close()


def _delivered(led: Ledger, iid: int, at: float, exits: list[dict]) -> None:
    """A rental that was proven at `at`, then had each of `exits` (a job_finished's fields)."""
    s = led.intent(
        "create",
        at=at,
        actor="rule:t",
        reason="r",
        campaign="c",
        gpu_name=REF,
        machine_id=iid,
        host_id=iid + 100,
        gpu_dph=0.3,
    )
    led.outcome(s, at=at, ok=True, instance_id=iid)
    led.record("preflight_passed", at=at + 60, actor="rule:t", reason="ok", instance_id=iid)
    for n, ex in enumerate(exits):
        led.record(
            "job_finished",
            at=at + 120 + n,
            actor="engine",
            reason="j",
            instance_id=iid,
            machine_id=iid,
            ok=ex.pop("ok"),
            detail=ex,
        )


def test_the_rentals_read_counts_jobs_finished_and_lost_for_the_hosts_fault_only():
    """A job lost because its host died counts against the machine; one lost to an outbid
    does not (the tier keeps outbids apart); a dud reads as a dud, dated at its last event."""
    led = new_ledger()
    _dud(led, 1, 600)
    _delivered(led, 2, 1000, [{"ok": True, "job": "a", "work_ref_h": 0.5}])
    lost = {"ok": False, "job": "b", "requeued": True, "host_fault": True}
    outbid = {"ok": False, "job": "c", "requeued": True, "host_fault": False}
    _delivered(led, 3, 2000, [lost, outbid, {"ok": True, "job": "b", "work_ref_h": 1.0}])
    got = {r.machine_id: r for r in led.rentals()}
    assert got[1].dud and not got[1].verified and got[1].at == 600
    assert (got[2].jobs_finished, got[2].jobs_lost, got[2].work_ref_h) == (1, 0, 0.5)
    assert (got[3].jobs_finished, got[3].jobs_lost, got[3].work_ref_h) == (1, 1, 1.0)
    assert got[3].host_id == 103 and got[3].dph == pytest.approx(0.3)
    led.close()


def test_the_rentals_read_carries_the_reliability_the_offer_listed():
    """The create's outcome keeps the score its offer listed; the record reads it back (none
    where a create wrote none, or wrote one that is no share)."""
    led = new_ledger()
    for iid, listed in ((1, 0.931), (2, None), (3, 7.5)):
        s = led.intent(
            "create", at=0, actor="rule:t", reason="r", campaign="c", gpu_name=REF, machine_id=iid
        )
        detail = {} if listed is None else {"reliability": listed}
        led.outcome(s, at=0, ok=True, instance_id=iid, detail=detail)
    got = {r.machine_id: r.listed_reliability for r in led.rentals()}
    assert got == {1: pytest.approx(0.931), 2: None, 3: None}
    led.close()


# what may happen to a rental after its create: (kind, phase, ok, detail)
STEPS = [
    ("status", "fact", None, {"status": "running"}),
    ("status", "fact", None, {"status": "offline"}),
    ("status", "fact", None, {"status": "exited"}),
    ("preflight_passed", "fact", None, {}),
    ("job_started", "fact", None, {"job": "a"}),
    ("job_started", "fact", None, {"job": "b"}),
    ("job_finished", "fact", True, {"job": "a", "work_ref_h": 0.5, "speed_share": 0.9}),
    ("job_finished", "fact", True, {"job": "b", "work_ref_h": 0.25, "speed_share": 1.1}),
    ("job_finished", "fact", False, {"job": "a", "requeued": True, "host_fault": True}),
    ("job_finished", "fact", False, {"job": "b", "requeued": True, "host_fault": False}),
    ("abandon", "fact", None, {"class": "boot_timeout"}),
    ("abandon", "fact", None, {"class": "cancelled"}),
    ("abandon", "fact", None, {"class": "ssh", "blame": "campaign"}),
    ("outbid", "fact", None, {}),
    ("throttle", "fact", None, {}),
    ("quarantine", "fact", None, {"class": "exited"}),
    ("stop", "outcome", True, {}),
    ("start", "outcome", True, {}),
    ("lost", "fact", True, {}),  # as the engine writes it
    ("returned", "fact", None, {}),
    ("destroy", "outcome", True, {}),
]


def _rentals(led: Ledger, rentals: list[tuple]) -> None:
    """Each (machine, campaign, steps, listed reliability, created) as the engine writes it."""
    at = max((e.at for e in led.events()), default=0.0)
    for iid, (machine, campaign, steps, listed, created) in enumerate(rentals, start=1):
        ctx = {"campaign": campaign, "machine_id": machine}
        at += 30
        s = led.intent(
            "create",
            at=at,
            actor="rule:t",
            reason="r",
            gpu_name=REF,
            gpu_dph=0.4,
            storage_dph=0.01,
            host_id=machine,
            **ctx,
        )
        if not created:  # an intent the market never answered
            continue
        detail = {} if listed is None else {"reliability": listed}
        led.outcome(s, at=at, ok=True, instance_id=iid, detail=detail)
        for n in steps:
            kind, phase, ok, detail = STEPS[n]
            at += 60
            if phase == "outcome":
                s = led.intent(kind, at=at, actor="rule:t", reason="r", instance_id=iid, **ctx)
                led.outcome(s, at=at, ok=True)
            else:
                led.record(
                    kind,
                    at=at,
                    actor="engine",
                    reason="r",
                    ok=ok,
                    detail=dict(detail),
                    instance_id=iid,
                    **ctx,
                )
    led.record(
        "job_finished",
        at=at,
        actor="engine",
        reason="r",
        ok=True,
        detail={"job": "z", "speed_share": 0.5},
        machine_id=99,  # a machine never rented: no speed of ours
    )
    led.tick(at + 600)  # the rentals still alive bill to here


def test_the_narrow_record_reads_answer_what_the_views_answer():
    """The rentals and speeds reads (records.py) equal the same questions asked of the
    `instances` and `hosts` views, on rentals drawn from every step that moves them: voided job
    exits, write-offs voided by a return, campaign faults, cancellations, creates without a
    machine, machines whose events carry no create, rentals still billing at the clock."""
    from rentwatch.ledger.records import RENTAL_RECORD_SQL, SPEEDS_SQL

    step = {(k, str(d.get("job")), d.get("requeued")): n for n, (k, _, _, d) in enumerate(STEPS)}
    written_off_and_back = [step["status", "None", None], step["lost", "None", None]]
    written_off_and_back.append(step["returned", "None", None])
    exit_voided = [step["preflight_passed", "None", None], step["job_started", "a", None]]
    exit_voided += [step["job_finished", "a", None], step["job_finished", "a", True]]
    rentals = [(11, "c1", written_off_and_back, None, True), (12, "c2", exit_voided, 0.93, True)]
    draw = random.Random(515151)
    for _ in range(30):
        rentals.append(
            (
                draw.choice([11, 12, 13, None]),  # machine (one without: no record)
                draw.choice(["c1", "c2"]),
                [draw.randrange(len(STEPS)) for _ in range(draw.randrange(11))],
                draw.choice([None, 0.93, 7.5]),  # the reliability its offer listed
                draw.random() < 0.9,
            )
        )
    with new_ledger() as led:
        _rentals(led, rentals)
        want = sorted(led._rows(VIEW_RENTALS), key=repr)
        assert sorted(led._rows(RENTAL_RECORD_SQL), key=repr) == want
        assert any(r[6] for r in want) and any(r[5] for r in want)  # duds and rentals proven
        speeds = [dict(led._rows(sql)) for sql in (SPEEDS_SQL, VIEW_SPEEDS)]
        # as `machine_speeds` reads them: a machine and its share, both known
        known = [{m: v for m, v in d.items() if None not in (m, v)} for d in speeds]
        assert known[0] == known[1] and known[1]
