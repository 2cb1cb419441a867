"""The fleet beside a proven cheap host (core/offers/proven_fleet.py): how few hosts to hold, and
which machines count as proven, each case a row."""

from __future__ import annotations

import math

import pytest
from rentwatch.core.decisions import AttemptView
from rentwatch.core.delivery import WorkOutlook
from rentwatch.core.lifecycle import Phase
from rentwatch.core.offers.proven_fleet import ProvenHost, fleet_beside_proven, proven_hosts
from rentwatch.core.offers.track_record import Memory, Record
from rentwatch.core.policy import DEFAULT

from .fake_market import offer

CHEAP_4090 = ProvenHost(1, 0.08, 1.0)  # $0.08 per ref-h, one ref-h an hour
CHEAP_H100 = ProvenHost(2, 0.10, 4.0)
DEAR = ProvenHost(3, 0.30, 1.0)


@pytest.mark.parametrize(
    ("proven", "stranger", "left", "hours", "fleet"),
    [
        ((), 0.20, 1.0, 2.0, 3),  # nothing proven: the campaign's fleet
        ((CHEAP_H100,), 0.20, 3.3, 1.5, 1),  # it alone does 6 ref-h in time
        ((CHEAP_4090,), 0.20, 3.3, 1.5, 3),  # 1.5 ref-h in time: not enough alone
        ((CHEAP_4090, ProvenHost(4, 0.09, 1.0)), 0.20, 2.5, 1.5, 2),  # two 4090s, 3 ref-h
        ((CHEAP_4090, CHEAP_H100), 0.20, 3.3, 1.5, 1),  # the fastest first
        ((DEAR,), 0.20, 0.5, 1.5, 3),  # dearer than a stranger: strangers are worth holding
        ((CHEAP_H100,), 0.12, 3.3, 1.5, 3),  # a stranger within the gap: not well above it
        ((CHEAP_H100,), 0.125, 3.3, 1.5, 1),  # at the gap exactly
        ((CHEAP_H100,), math.inf, 3.3, 1.5, 1),  # no stranger on offer at all
        ((CHEAP_H100,), 0.20, 3.3, 0.0, 3),  # the deadline passed: nothing is cut
        ((CHEAP_H100,), 0.20, 0.0, 1.5, 3),  # no work left: the rules finish, not this
    ],
)
def test_fleet_beside_proven(proven, stranger, left, hours, fleet):
    n, why = fleet_beside_proven(3, proven, stranger, left, hours)
    assert n == fleet
    assert bool(why) == (fleet < 3)


def test_never_above_the_campaigns_fleet():
    many = [ProvenHost(i, 0.05, 0.1) for i in range(10)]
    assert fleet_beside_proven(2, many, 0.2, 5.0, 1.0)[0] == 2


DELIVERED = Record(delivered=2.0, jobs_finished=2.0, work_ref_h=1.5)
VERIFIED_ONLY = Record(delivered=0.5)  # verified, never finished a job
BROKE = Record(delivered=1.0, failed=2.0, jobs_finished=1.0)


def _outlook(machines: dict[int, Record]) -> WorkOutlook:
    return WorkOutlook(ref_tflops=150.0, job_ref_h=1.0, memory=Memory(machines=machines))


def _held(machine: int, dph: float, gpu: str = "RTX 4090") -> AttemptView:
    return AttemptView(
        instance_id=machine + 1000,
        machine_id=machine,
        offer_gpu=gpu,
        phase=Phase.VERIFIED,
        status="running",
        status_msg=None,
        status_since=0.0,
        created_at=0.0,
        passed_preflight=True,
        dph=dph,
    )


@pytest.mark.parametrize(
    ("record", "counts"),
    [(DELIVERED, True), (VERIFIED_ONLY, False), (BROKE, False), (None, False)],
)
def test_proven_is_delivered(record, counts):
    machines = {7: record} if record is not None else {}
    proven, _ = proven_hosts([_held(7, 0.093)], [], {}, _outlook(machines))
    assert [h.machine_id for h in proven] == ([7] if counts else [])


def test_held_and_offered_proven_hosts_and_the_best_stranger():
    work = _outlook({7: DELIVERED, 8: DELIVERED})
    offers = [offer(1, 8, 0.2, "RTX 4090"), offer(2, 50, 0.3, "RTX 4090"), offer(3, 51, 0.5)]
    proven, stranger = proven_hosts([_held(7, 0.093)], offers, {}, work)
    by_machine = {h.machine_id: h for h in proven}
    assert set(by_machine) == {7, 8}
    assert by_machine[7].usd_per_ref_h == pytest.approx(0.093 / 0.93)  # its price over its speed
    assert by_machine[8].usd_per_ref_h > 0.2 / 0.93  # an offer's boot and odds priced in
    assert 0.3 / 0.93 < stranger < 0.5 / 0.5  # machine 50's, the cheaper stranger
    assert proven_hosts([], [offers[1]], {}, work)[0] == []  # a stranger is never proven


def test_off_by_default():
    assert DEFAULT.proven_fleet_h == 0.0
    assert DEFAULT.with_overrides({"proven_fleet_h": 1.5}).proven_fleet_h == 1.5
