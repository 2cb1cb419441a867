"""Hosts for the work and the end of it: never more hosts than the fleet, and a proven host with
no job left is stopped at once once nothing is queued (`rule:drained`). Pure core, wired
through `decide`."""

from __future__ import annotations

import pytest
from rentwatch.core.campaign import Job
from rentwatch.core.decisions import AttemptView, Create, Finish, FleetSnapshot, Stop
from rentwatch.core.errors import ConfigError
from rentwatch.core.jobs import JobQueue
from rentwatch.core.lifecycle import Phase
from rentwatch.core.policy import DEFAULT, SEED
from rentwatch.core.rules import decide

from .test_hedge import GOOD_MARKET, OFFERS, OfferTerms

NOW = 100_000.0


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
    )


def creates(snap: FleetSnapshot, policy) -> list[Create]:
    return [d for d in decide(snap, policy, NOW) if isinstance(d, Create)]


def test_decide_rents_no_more_hosts_than_the_fleet_for_queued_jobs():
    assert len(creates(market(1, 2), DEFAULT)) == 1  # the preset: the fleet is the cap
    assert len(creates(market(1, 2), SEED)) == 1  # the article's policy: the fleet, no more
    probe = FleetSnapshot(**{**market(1, 2).__dict__, "offers": None})
    assert len(creates(probe, DEFAULT)) <= 1  # without the offers at hand, no more either
    assert len(creates(market(3, 2), DEFAULT)) == 2  # and no more than the work


def test_a_campaign_file_naming_a_removed_setting_is_told_so():
    for key in ("max_extra_hosts", "fleet_by_worth", "wide_search", "proven_bid_share"):
        with pytest.raises(ConfigError, match=f"{key}.*removed"):
            DEFAULT.with_overrides({key: 1})


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


def test_the_job_queue_says_which_host_is_free_since_when():
    q = JobQueue(tuple(Job(name=f"j{i}", run="true") for i in range(3)))
    a, b = q.take(1, 100.0), q.take(2, 100.0)
    assert a is not None and b is not None
    assert q.holds(1) and q.free_since(1, 50.0) == 50.0
    q.finished(a, 0, 1900.0)
    assert not q.holds(1) and q.free_since(1, 50.0) == 1900.0
    b.status = "finishing"  # exited, artifacts still coming off: still its host's
    assert q.holds(2)
    q.finished(b, 0, 1900.0)


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
