"""A slow proven host against a fresh create (core/worth/swap.py, engine/jobs/swap_watch.py): stopped,
never destroyed, only while no job runs on it and work is queued, and only after it has been
slow for a while by a threshold it must fall well under to be forgiven (no flapping)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from rentwatch.core.bidding.rules import BidTerms, as_rented
from rentwatch.core.campaign import Job
from rentwatch.core.decisions import Abandon, AttemptView, Create, FleetSnapshot, Stop
from rentwatch.core.delivery import WorkOutlook, outlook
from rentwatch.core.jobs import JobQueue
from rentwatch.core.lifecycle import Lifecycle, Phase
from rentwatch.core.models import Offer
from rentwatch.core.offers.choice import Exclusions, OfferTerms
from rentwatch.core.offers.work_cost import host_cost
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
from rentwatch.engine.jobs.swap_watch import LOOK_EVERY_S, SEARCH_EVERY_S, SwapWatch

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


def _fleet_of_one(a: AttemptView, **kw: object) -> FleetSnapshot:
    """A fleet of one proven host with two jobs queued of three, money to spare."""
    base = dict(fleet=1, max_creates=10, creates=1, budget_usd=50.0, spent_usd=1.0, jobs_total=3)
    return FleetSnapshot(attempts=(a,), jobs_pending=2, **{**base, **kw})  # type: ignore[arg-type]


def test_decide_stops_the_slow_free_host_and_rents_a_replacement():
    snap = _fleet_of_one(_view(), slow={7: Slow(0.0, "slow for its price")})
    # the swap overlaps: its replacement is rented first, and it works on meanwhile
    out = decide(snap, DEFAULT, SLOW_DWELL_S + 1)
    assert [type(d) for d in out] == [Create]
    busy = replace(snap, attempts=(_view(busy=True),), jobs_running=1)
    assert [type(d) for d in decide(busy, DEFAULT, SLOW_DWELL_S + 1)] == [Create]
    # once the replacement is in service, the slow host is stopped when free, nothing rented
    spare = _view(instance_id=8, machine_id=80)
    both = replace(snap, attempts=(_view(), spare), creates=2)
    out = decide(both, DEFAULT, SLOW_DWELL_S + 1)
    assert [type(d) for d in out] == [Stop]
    assert (out[0].rule, out[0].instance_id) == ("rule:swap", 7)  # type: ignore[union-attr]
    busy = replace(both, attempts=(_view(busy=True), spare), jobs_running=1)
    assert decide(busy, DEFAULT, SLOW_DWELL_S + 1) == []  # its job is not thrown away


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
    searched_at: float = 0.0

    def work_outlook(self, jobs: list[Job], hosts: int) -> WorkOutlook | None:
        return outlook(jobs, {}, hosts)

    def fit(self) -> list[Offer]:
        return list(self.offers)

    def terms(self) -> OfferTerms:
        return OfferTerms(10.0, 12.0)

    def exclusions(self) -> Exclusions:
        return Exclusions()

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
    # due, it takes jobs until its replacement is in service beside the fast one
    assert not watch.due(1, SLOW_DWELL_S)
    fleet.attempts[3] = _host(3, 0.40, 0.95)
    assert not watch.due(1, SLOW_DWELL_S - 1) and watch.due(1, SLOW_DWELL_S)
    del fleet.attempts[3]
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


def test_an_overlapping_swap_bills_the_fresh_hosts_boot_and_duds_but_does_not_wait_on_them():
    cost = host_cost(0.3, 1.0, 0.5, 0.5, 2.0, 0.25)  # one dud expected, 0.5 h each, 0.25 h boot
    assert cost.lead_h == pytest.approx(0.75)
    assert cost.per_ref_h(0.7) - cost.per_ref_h(0.7, covered=True) == pytest.approx(0.7 * 0.75 / 2)
    assert cost.per_ref_h(0.0) == cost.per_ref_h(0.0, covered=True)  # their bill stays
    work = WorkOutlook(expected_tflops(REF) or 1.0, 2.0, boot_h=0.25)
    offers = [_offer(1, REF, 0.35, 11)]
    waited, covered = (fresh_usd_per_ref_h(offers, {}, work, 0.7, c) for c in (False, True))
    assert waited is not None and covered is not None and covered[0] < waited[0]


def _jobs(n: int) -> JobQueue:
    return JobQueue(tuple(Job(f"j{i}", "true", ref_gpu=REF, ref_hours=1.0) for i in range(n)))


def test_the_watch_prices_a_fresh_create_as_the_swap_overlaps():
    # a 4090 at 60% of its speed for $0.40/h, against a fresh 4090 at $0.35/h on a market that
    # delivers: 1.3x the fresh one's cost waiting on its boot and duds (not slow), 1.6x without
    # (slow): the work waits on neither, its host works on meanwhile
    fleet = Fleet(1)
    fleet.attempts = {1: _host(1, 0.40, 0.6)}
    watch = SwapWatch(fleet, _jobs(4))
    watch.look(0.0, _Book([_offer(9, REF, 0.35, 90)]), True)  # type: ignore[arg-type]
    assert set(watch.slow) == {1}, "priced as if the work waited on the fresh host's boot"


def test_the_watch_prices_a_fresh_create_at_what_it_would_pay():
    # a bid search lists the offer at its bid_floor ($0.30/h); the create bids over it, so a
    # host 1.6x dearer per unit than the listing is not slow against what a create pays
    fleet = Fleet(1)
    fleet.attempts = {1: _host(1, 0.40, 0.7)}
    listed = replace(_offer(9, REF, 0.30, 90), gpu_dph=0.60, bid_floor=0.30)
    terms = BidTerms("interruptible", "auto")
    paid = as_rented([listed], terms)
    assert paid is not None and paid[0].dph_total > listed.dph_total * 1.2
    watch = SwapWatch(fleet, _jobs(4))
    watch.look(0.0, _Book([listed]), True)  # type: ignore[arg-type]
    assert set(watch.slow) == {1}  # read at the listing's price, it would be slow
    watch.slow, watch.looked_at = {}, -1e18
    watch.look(0.0, _Book([listed]), True, terms)  # type: ignore[arg-type]
    assert watch.slow == {}, "priced at the listing's bid_floor, not at the bid a create places"


def test_a_leaving_host_works_on_while_its_replacement_boots_and_the_campaign_goes_on():
    slow = {7: Slow(0.0, "slow for its price")}
    snap = _fleet_of_one(
        _view(busy=True),
        jobs_running=1,
        slow=slow,
        offers=(),  # nothing fit on the market now
        terms=OfferTerms(10.0, 12.0),
        deadline=1e9,  # a deadline: a wait is dear, and a missing host is hedged with spares
    )
    now = SLOW_DWELL_S + 1
    assert decide(snap, DEFAULT, now) == []  # no replacement to rent: it carries the work on
    booting = _view(instance_id=8, machine_id=80, phase=Phase.BOOTING, passed_preflight=False)
    offers = tuple(_offer(i, REF, 0.10, 100 + i) for i in range(5))
    renting = replace(snap, offers=offers)
    creates = [d for d in decide(renting, DEFAULT, now) if isinstance(d, Create)]
    assert len(creates) == 1  # its replacement, no spare: the work waits on neither
    assert [
        d
        for d in decide(replace(renting, attempts=(_view(busy=True), booting)), DEFAULT, now)
        if isinstance(d, Create)
    ] == []  # its replacement boots: nothing more


def test_the_watch_searches_again_for_a_look_on_a_stale_search():
    fleet = Fleet(1)
    fleet.attempts = {1: _host(1, 0.40, 0.6)}
    queue = _jobs(3)
    watch = SwapWatch(fleet, queue)
    book = _Book([_offer(9, REF, 0.35, 90)])
    book.searched_at = 0.0
    assert not watch.wants_search(SEARCH_EVERY_S - 1, book, True)  # type: ignore[arg-type]
    assert watch.wants_search(SEARCH_EVERY_S, book, True)  # type: ignore[arg-type]
    assert not watch.wants_search(SEARCH_EVERY_S, book, False)  # type: ignore[arg-type]
    for j in queue.jobs:
        j.status = "done"
    assert not watch.wants_search(SEARCH_EVERY_S, book, True)  # type: ignore[arg-type]
