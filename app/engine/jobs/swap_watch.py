"""The slow clock of each proven host (`core.worth.swap`): once a minute of market time, while sized
jobs are queued, each host in service is priced per delivered reference GPU-hour for the work a
host still has to take on (its measured speed, its price) against a fresh create from the offers
at hand, priced as the create would pay them (its bid, or on-demand) with its boot and duds
billed but not waited on (the swap overlaps); the clock starts, stands or clears by the rule's
hysteresis. A host slow for long enough is leaving: the rules rent its replacement, and once
that is in service the dispatch gives it no more jobs and the rules stop it when free."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...core.bidding.rules import BidTerms, as_rented
from ...core.delivery import WorkOutlook
from ...core.jobs import JobQueue, JobState
from ...core.offers.choice import fit_offers
from ...core.preflight.gpu_specs import expected_tflops
from ...core.worth.swap import (
    Busy,
    Free,
    Slow,
    fresh_usd_per_ref_h,
    keep_usd_per_ref_h,
    moves_off,
    next_slow,
    replaced,
    swap_due,
)
from ..attempt import Attempt
from ..fleet import Fleet

if TYPE_CHECKING:
    from ..offers import OfferBook

LOOK_EVERY_S = 60.0  # market seconds between looks (each reads our record from the ledger)
# an offer search older than this is refreshed for a look: a full fleet searches no more, and
# the offers an hour-old search saw are gone or taken
SEARCH_EVERY_S = 300.0


@dataclass(eq=False)
class SwapWatch:
    fleet: Fleet
    queue: JobQueue
    # when a job's checkpoint last came off whole (None: never)
    pulled_at: Callable[[JobState], float | None] = lambda _: None
    slow: dict[int, Slow] = field(default_factory=dict, init=False)  # instance id -> why slow
    # instance id -> (its running job, why): the job moves to a free proven host
    moves: dict[int, tuple[str, str]] = field(default_factory=dict, init=False)
    looked_at: float = field(default=-1e18, init=False)

    def moving(self) -> dict[int, str]:
        """The hosts to stop for their running job to move (`core.worth.swap.moves_off`), while
        that job still runs there."""
        return {
            iid: why
            for iid, (name, why) in self.moves.items()
            if (job := self.queue.on(iid)) is not None and job.name == name
        }

    def due(self, instance_id: int, now: float) -> bool:
        """Due for a swap and replaced: it takes no more jobs (`core.worth.swap.replaced`)."""
        if not swap_due(self.slow.get(instance_id), now):
            return False
        hosts = [a.instance_id for a in self.fleet.in_service()]
        going = {i for i in hosts if swap_due(self.slow.get(i), now)}
        want = min(self.fleet.wanted, self.queue.pending + self.queue.running)
        return replaced(hosts, going, want)

    def wants_search(self, now: float, book: OfferBook, can_create: bool) -> bool:
        """A look is due with work queued and hosts at work, on a search older than
        `SEARCH_EVERY_S`: search first, so the look prices offers the market has now."""
        return (
            can_create
            and book.policy.rank == "expected_cost"
            and now - self.looked_at >= LOOK_EVERY_S
            and now - book.searched_at >= SEARCH_EVERY_S
            and self.queue.pending > 0
            and bool(self.fleet.in_service())
        )

    def look(
        self, now: float, book: OfferBook, can_create: bool, bidding: BidTerms | None = None
    ) -> None:
        """One more look at every host in service (see the module's doc)."""
        if book.policy.rank != "expected_cost" or now - self.looked_at < LOOK_EVERY_S:
            return
        self.looked_at = now
        hosts = self.fleet.in_service()
        self.slow = {k: v for k, v in self.slow.items() if any(a.instance_id == k for a in hosts)}
        pending = [j.job for j in self.queue.jobs if j.status == "pending"]
        self.moves = {} if pending else self._moves(now, book)
        work = book.work_outlook(pending, max(1, len(hosts))) if pending and hosts else None
        fresh = None
        if work is not None and can_create:
            value = book.policy.value_of_time_usd_per_h
            offers = as_rented(book.offers, bidding) or ()
            fit = fit_offers(offers, book.terms(), book.policy, book.exclusions())
            fresh = fresh_usd_per_ref_h(fit, book.history(), work, value, covered=True)
        for a in hosts:
            ratio, why = None, ""
            if work is not None and fresh is not None and fresh[0] > 0:
                rate = self.rate(a, work)
                keep = keep_usd_per_ref_h(
                    a.gpu_dph + a.storage_dph,
                    rate,
                    work.job_ref_h,
                    book.policy.value_of_time_usd_per_h,
                )
                ratio = keep / fresh[0]
                why = (
                    f"slow for its price: {rate:.2f} ref-h/h at ${a.gpu_dph + a.storage_dph:.3f}/h "
                    f"is ${keep:.3f} per ref-h, {ratio:.1f}x a fresh create's ${fresh[0]:.3f} "
                    f"({fresh[1]})"
                )
            slow = next_slow(self.slow.get(a.instance_id), ratio, now, why)
            if slow is None:
                self.slow.pop(a.instance_id, None)
            else:
                self.slow[a.instance_id] = slow

    def _moves(self, now: float, book: OfferBook) -> dict[int, tuple[str, str]]:
        """Nothing queued: the running jobs worth moving to a free proven host (`moves_off`),
        each host priced per reference GPU-hour at its measured speed."""
        hosts = self.fleet.in_service()
        running = [j for j in self.queue.jobs if j.status == "running"]
        work = book.work_outlook([j.job for j in running], max(1, len(hosts))) if running else None
        if work is None:
            return {}
        value = book.policy.value_of_time_usd_per_h
        busy, free, names = [], [], {}
        for a in hosts:
            rate, dph = self.rate(a, work), a.gpu_dph + a.storage_dph
            job = self.queue.on(a.instance_id)
            if job is None:
                if not self.queue.holds(a.instance_id) and not self.due(a.instance_id, now):
                    free.append(Free(a.instance_id, keep_usd_per_ref_h(dph, rate, 1.0, value), dph))
                continue
            d = job.delivery
            if not job.size or d is None or d.work_ref_h is None or job.started_at is None:
                continue
            left = max(0.0, job.size - d.work_ref_h)
            pulled = self.pulled_at(job) if job.job.checkpoint else None
            since = job.started_at if pulled is None else max(pulled, job.started_at)
            lost = min(d.work_ref_h, rate * max(0.0, now - since) / 3600)
            price = keep_usd_per_ref_h(dph, rate, max(left, 1e-6), value)
            busy.append(Busy(a.instance_id, price, left, lost))
            names[a.instance_id] = job.name
        return {iid: (names[iid], why) for iid, why in moves_off(busy, free).items()}

    def rate(self, a: Attempt, work: WorkOutlook) -> float:
        """Reference GPU-hours an hour this host delivers, as best measured: its running job's, else
        the ledger's, else its preflight's less throttling, else its model's."""
        job = self.queue.on(a.instance_id)
        d = job.delivery if job is not None else None
        if d is not None and d.source == "progress" and d.tflops:
            return d.tflops / work.ref_tflops
        if a.machine_id in work.speeds:
            return work.rate(a.gpu_name, a.machine_id)
        v, model = a.verdict, expected_tflops(a.gpu_name)
        if v is not None and v.tflops and v.expected and model:
            # the probe's speed as a share of what it expects on this model (its torch or its
            # driver path), carried over to the model's bf16 speed
            return model * v.tflops / v.expected * (1 - a.slowdown) / work.ref_tflops
        return work.rate(a.gpu_name, a.machine_id)
