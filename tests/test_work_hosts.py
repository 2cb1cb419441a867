"""Hosts for the work and the end of it: more hosts than the fleet while queued jobs would wait
and the wait saved pays (`core/hedge.work_hosts`), and a proven host with no job left is
stopped at once once nothing is queued (`rule:drained`). Pure core, wired through `decide`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rentwatch.core.campaign import Job
from rentwatch.core.hedge import WorkInputs, work_hosts
from rentwatch.core.jobs import JobQueue
from rentwatch.core.lifecycle import Phase
from rentwatch.core.policy import DEFAULT, SEED
from rentwatch.core.rules import AttemptView, Create, Finish, FleetSnapshot, Stop, decide

from tests.fuzzing import examples

from .test_hedge import GOOD_MARKET, OFFERS, OfferTerms

NOW = 100_000.0


def hosts(**kw) -> int:
    base = dict(
        fleet=1,
        work=2,
        job_h=0.5,
        p_deliver=0.5,
        dud_usd=0.03,
        host_usd=0.05,
        value_of_time_usd_per_h=0.7,
        max_extra=3,
    )
    base.update(kw)
    return work_hosts(WorkInputs(**base))[0]


@pytest.mark.parametrize(
    "kw, expect",
    [
        ({}, 2),  # a second job waits 30 min for the only host: a second host pays
        ({"value_of_time_usd_per_h": 0.0}, 1),  # waiting costs nothing: the fleet
        ({"max_extra": 0}, 1),  # the operator allows no host beyond the fleet
        ({"work": 1}, 1),  # no queued job would wait
        ({"host_usd": 1.0}, 1),  # an extra host costs more than the wait it saves
        ({"fleet": 3, "work": 6}, 6),  # one job each: the work takes one round, not two
        ({"fleet": 3, "work": 6, "max_extra": 2}, 3),  # 5 hosts still need two rounds
        ({"fleet": 3, "work": 6, "value_of_time_usd_per_h": 0.2}, 3),
    ],
)
def test_hosts_for_the_work(kw, expect):
    assert hosts(**kw) == expect


@settings(max_examples=examples(200), deadline=None)
@given(
    st.integers(0, 5),
    st.integers(0, 12),
    st.floats(0.0, 3.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 20.0),
    st.integers(0, 4),
)
def test_hosts_stay_between_the_fleet_and_the_work(fleet, work, job_h, p, value, cap):
    n = hosts(
        fleet=fleet,
        work=work,
        job_h=job_h,
        p_deliver=p,
        value_of_time_usd_per_h=value,
        max_extra=cap,
    )
    assert min(fleet, work) <= n <= max(min(fleet, work), min(work, fleet + cap))


def market(n: int, jobs: int) -> FleetSnapshot:
    return FleetSnapshot(
        fleet=n,
        max_creates=40,
        creates=0,
        budget_usd=20,
        spent_usd=0,
        attempts=(),
        offers=OFFERS,
        terms=OfferTerms(max_dph=1.0, image_cuda=12.4),
        history=GOOD_MARKET,
        jobs_pending=jobs,
        jobs_total=jobs,
        job_h=0.5,
    )


def creates(snap: FleetSnapshot, policy) -> list[Create]:
    return [d for d in decide(snap, policy, NOW) if isinstance(d, Create)]


WIDE = DEFAULT.with_overrides({"max_extra_hosts": 3})  # off in the preset (docs/benchmarks.md)


def test_decide_rents_a_host_for_each_queued_job_and_says_why():
    made = creates(market(1, 2), WIDE)
    assert len(made) == 2 and "beyond the fleet of 1 for 2 jobs" in made[-1].reason
    assert len(creates(market(1, 2), DEFAULT)) == 1  # the preset: the fleet is the cap
    assert len(creates(market(1, 2), SEED)) == 1  # the article's policy: the fleet, no more
    # without the offers at hand the rules ask for a search as if it could pay
    probe = FleetSnapshot(**{**market(1, 2).__dict__, "offers": None})
    assert len(creates(probe, WIDE)) == 2


def proven(iid: int, free_since: float | None, busy: bool = False) -> AttemptView:
    return AttemptView(
        instance_id=iid,
        machine_id=iid * 10,
        offer_gpu="RTX 3090",
        phase=Phase.VERIFIED,
        status="running",
        status_msg="success",
        status_since=NOW - 3000,
        created_at=NOW - 4000,
        running_at=NOW - 3000,
        passed_preflight=True,
        busy=busy,
        free_since=free_since,
        util_low_since=NOW - 30,
    )


def drained(policy, *attempts, pending=0, running=1) -> list[Stop]:
    snap = FleetSnapshot(
        fleet=2,
        max_creates=10,
        creates=2,
        budget_usd=10,
        spent_usd=0,
        attempts=attempts,
        jobs_pending=pending,
        jobs_running=running,
        jobs_total=4,
    )
    return [d for d in decide(snap, policy, NOW) if isinstance(d, Stop)]


def test_a_host_with_no_job_left_is_stopped_once_nothing_is_queued():
    [stop] = drained(DEFAULT, proven(1, NOW - 61), proven(2, None, busy=True))
    assert stop.instance_id == 1 and stop.rule == "rule:drained"
    assert stop.quarantine is None  # nothing wrong with the host
    assert "no job on it for 1m01s" in stop.reason
    assert not drained(DEFAULT, proven(1, NOW - 30), proven(2, None, busy=True))  # grace
    assert not drained(DEFAULT, proven(1, NOW - 600), pending=1)  # a job waits for it
    assert not drained(DEFAULT, proven(1, NOW - 600, busy=True))  # artifacts coming off
    assert not drained(SEED, proven(1, NOW - 600))  # the article's: its idle rule decides


def test_the_job_queue_says_which_host_is_free_since_when_and_how_long_jobs_take():
    q = JobQueue(tuple(Job(name=f"j{i}", run="true") for i in range(3)))
    a, b = q.take(1, 100.0), q.take(2, 100.0)
    assert a is not None and b is not None
    assert q.hours_seen(150.0, 0.25) == 0.25  # nothing finished, none long: the prior
    assert q.hours_seen(1900.0, 0.25) == pytest.approx(1800 / 3600)  # running that long
    assert q.holds(1) and q.free_since(1, 50.0) == 50.0
    q.finished(a, 0, 1900.0)
    assert not q.holds(1) and q.free_since(1, 50.0) == 1900.0
    b.status = "finishing"  # exited, artifacts still coming off: still its host's
    assert q.holds(2)
    q.finished(b, 0, 1900.0)
    assert q.hours_seen(2000.0, 0.25) == pytest.approx(1800 / 3600)  # the finished ones' mean
    q.take(1, 2000.0)
    assert q.hours_seen(9300.0, 0.25) == pytest.approx(7300 / 3600)  # one running longer


def test_running_out_of_offers_does_not_end_work_that_proven_hosts_carry():
    """No fit offer left (or creates, or money) with jobs still to do: the hosts already
    proven carry the work on; the campaign ends only when none is left to carry it."""
    snap = FleetSnapshot(
        fleet=4,
        max_creates=40,
        creates=9,
        budget_usd=20,
        spent_usd=1,
        attempts=(proven(1, None, busy=True), proven(2, None, busy=True)),
        offers=(),
        terms=OfferTerms(max_dph=1.0, image_cuda=12.4),
        jobs_pending=3,
        jobs_running=2,
        jobs_total=8,
    )
    assert not [d for d in decide(snap, DEFAULT, NOW) if isinstance(d, Finish)]
    assert not [d for d in decide(snap, SEED, NOW) if isinstance(d, Finish)]
    nobody = FleetSnapshot(**{**snap.__dict__, "attempts": (), "jobs_running": 0})
    [end] = [d for d in decide(nobody, DEFAULT, NOW) if isinstance(d, Finish)]
    assert end.rule == "rule:no_offers" and not end.ok
