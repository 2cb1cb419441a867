"""A slow proven host against a fresh create (core/worth/swap.py, engine/jobs/swap_watch.py): stopped,
never destroyed, only while no job runs on it and work is queued, and only after it has been
slow for a while by a threshold it must fall well under to be forgiven (no flapping)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from rentwatch.core.campaign import Job
from rentwatch.core.decisions import Abandon, AttemptView, Create, FleetSnapshot, Stop
from rentwatch.core.delivery import WorkOutlook, outlook
from rentwatch.core.jobs import JobQueue
from rentwatch.core.lifecycle import Lifecycle, Phase
from rentwatch.core.models import Offer
from rentwatch.core.policy import DEFAULT, Policy
from rentwatch.core.preflight.gpu_specs import expected_tflops
from rentwatch.core.preflight.verdict import Verdict
from rentwatch.core.rules import decide
from rentwatch.core.worth.swap import (
    SLOW_DWELL_S,
    SLOW_ENTER,
    SLOW_LEAVE,
    Slow,
    fresh_usd_per_ref_h,
    keep_usd_per_ref_h,
    next_slow,
    swap_due,
    swap_out,
)
from rentwatch.engine.attempt import Attempt
from rentwatch.engine.fleet import Fleet
from rentwatch.engine.jobs.swap_watch import LOOK_EVERY_S, SwapWatch

REF = "RTX 4090"


def _offer(oid: int, gpu: str, dph: float, machine: int) -> Offer:
    return Offer(oid, machine, 1, gpu, 1, dph, dph, 0.1, 12.8, 0.98, None, 24576.0, "US")


def _view(**kw: object) -> AttemptView:
    base = AttemptView(
        instance_id=7,
        machine_id=70,
        offer_gpu=REF,
        phase=Phase.VERIFIED,
        status="running",
        status_msg="",
        status_since=0.0,
        created_at=0.0,
        running_at=100.0,
        passed_preflight=True,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("readings", "slow_from"),
    [
        ([1.6], 0),  # over the entry threshold: slow from that look
        ([1.6, 1.3, 1.3], 0),  # between the thresholds: still slow, its clock kept
        ([1.6, 1.1], None),  # under the exit threshold: forgiven
        ([1.3, 1.4], None),  # between the thresholds, never over the entry: never slow
        ([1.6, 1.1, 1.6], 2),  # forgiven, then slow again: its clock starts over
        ([1.6, None, 1.6], 0),  # nothing to compare with for a look: the clock stands
    ],
)
def test_the_slow_clock_has_hysteresis(readings: list[float | None], slow_from: int | None):
    assert SLOW_LEAVE < SLOW_ENTER
    slow: Slow | None = None
    for t, ratio in enumerate(readings):
        slow = next_slow(slow, ratio, float(t), "why")
    assert (slow.since if slow else None) == slow_from


def test_a_slow_host_is_stopped_only_when_free_with_work_queued_and_after_the_dwell():
    slow = Slow(0.0, "slow for its price")
    due = SLOW_DWELL_S
    assert swap_out(_view(), slow, True, due - 1) is None  # not slow for long enough yet
    assert not swap_due(slow, due - 1) and swap_due(slow, due)
    assert swap_out(_view(busy=True), slow, True, due) is None  # its job is not thrown away
    assert swap_out(_view(), slow, False, due) is None  # no work left for a replacement
    assert swap_out(_view(), None, True, due) is None  # not slow
    d = swap_out(_view(), slow, True, due)
    assert isinstance(d, Stop) and not isinstance(d, Abandon)
    assert (d.rule, d.instance_id, d.reason, d.failure_class) == (
        "rule:swap",
        7,
        "slow for its price",
        None,  # stopped, not quarantined: it delivers, only dearly
    )


def test_decide_stops_the_slow_free_host_and_rents_a_replacement():
    snap = FleetSnapshot(
        fleet=1,
        max_creates=10,
        creates=1,
        budget_usd=50.0,
        spent_usd=1.0,
        attempts=(_view(),),
        jobs_pending=2,
        jobs_total=3,
        slow={7: Slow(0.0, "slow for its price")},
    )
    out = decide(snap, DEFAULT, SLOW_DWELL_S + 1)
    assert [type(d) for d in out] == [Stop, Create]
    assert out[0].rule == "rule:swap"  # type: ignore[union-attr]
    busy = replace(snap, attempts=(_view(busy=True),), jobs_running=1)
    assert not any(isinstance(d, Stop) for d in decide(busy, DEFAULT, SLOW_DWELL_S + 1))


def test_a_proven_host_bills_only_its_work_a_fresh_one_its_boot_and_duds_too():
    work = WorkOutlook(expected_tflops(REF) or 1.0, 1.0)
    keep = keep_usd_per_ref_h(0.35, 0.93, 1.0, 0.0)
    assert keep == pytest.approx(0.35 / 0.93)
    fresh = fresh_usd_per_ref_h([_offer(1, REF, 0.35, 11)], {}, work, 0.0)
    assert fresh is not None and fresh[0] > keep  # the same card fresh costs more: its boot
    assert fresh_usd_per_ref_h([], {}, work, 0.0) is None


@dataclass
class _Book:
    """The offer book as the watch reads it: its policy, the fit offers, our record."""

    offers: list[Offer]
    policy: Policy = DEFAULT
    asked: list[float] = field(default_factory=list)

    def work_outlook(self, jobs: list[Job], hosts: int) -> WorkOutlook | None:
        return outlook(jobs, {}, hosts)

    def fit(self) -> list[Offer]:
        return list(self.offers)

    def history(self) -> dict[int, tuple[int, int, float]]:
        return {500 + i: (1, 0, 0.0) for i in range(6)}  # a market that delivers


def _host(iid: int, dph: float, share: float) -> Attempt:
    a = Attempt(iid, None, iid * 10, 1, REF, 0.0, dph, 0.0, Lifecycle(Phase.VERIFIED, proven=True))
    a.verdict = Verdict(True, None, "ok", tflops=150.0 * share, expected=150.0)
    return a


def test_the_watch_finds_the_slow_host_keeps_its_clock_and_forgives_it_once_fast():
    fleet = Fleet(2)
    slow, fast = _host(1, 0.40, 0.3), _host(2, 0.40, 0.95)  # a 4090 at 30% of its speed
    fleet.attempts = {1: slow, 2: fast}
    queue = JobQueue(tuple(Job(f"j{i}", "true", ref_gpu=REF, ref_hours=1.0) for i in range(4)))
    watch = SwapWatch(fleet, queue)
    book = _Book([_offer(9, REF, 0.35, 90)])
    watch.look(0.0, book, True)  # type: ignore[arg-type]
    assert set(watch.slow) == {1} and "fresh create" in watch.slow[1].why
    assert not watch.due(1, SLOW_DWELL_S - 1) and watch.due(1, SLOW_DWELL_S)
    book.offers = []  # the offers gone for a look: nothing to compare with, the clock stands
    watch.look(LOOK_EVERY_S, book, True)  # type: ignore[arg-type]
    assert watch.slow[1].since == 0.0
    book.offers = [_offer(9, REF, 0.35, 90)]
    watch.look(LOOK_EVERY_S + 1, book, True)  # type: ignore[arg-type]
    assert watch.slow[1].since == 0.0  # within a minute of the last look: not looked again
    watch.look(2 * LOOK_EVERY_S, book, False)  # no create left: nothing to swap it for
    assert watch.slow[1].since == 0.0
    slow.verdict = Verdict(True, None, "ok", tflops=150.0, expected=150.0)  # fast after all
    watch.look(3 * LOOK_EVERY_S, book, True)  # type: ignore[arg-type]
    assert watch.slow == {}
    # seed never swaps: it is the article's
    watch.slow, watch.looked_at = {}, -1e18
    slow.verdict = Verdict(True, None, "ok", tflops=45.0, expected=150.0)
    watch.look(0.0, _Book([_offer(9, REF, 0.35, 90)], policy=replace(DEFAULT, rank="price")), True)  # type: ignore[arg-type]
    assert watch.slow == {}
