"""What the rules decide on and the asking: every poll's `FleetSnapshot`, built from the engine's
parts, and `decide()` asked on it. Nothing here acts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..core.bidding.rules import BidTerms, tier_ran_dry
from ..core.campaign import Campaign
from ..core.decisions import Create, Decision, FleetSnapshot
from ..core.delivery import WorkOutlook
from ..core.lifecycle import Phase
from ..core.policy import Policy
from ..core.rules import decide
from ..market.protocol import Market
from .attempt import Attempt
from .blame_book import BlameBook
from .fleet import Fleet
from .hosts.link import HostLink
from .jobs.work import JobWork
from .offers import OfferBook
from .operator import HUMAN_RECENT_S, STARTED_BY_PERSON
from .tier import TierWatch


@dataclasses.dataclass(eq=False)
class Decider:
    market: Market
    policy: Policy
    fleet: Fleet
    job_work: JobWork
    offer_book: OfferBook
    blame_book: BlameBook
    tier: TierWatch
    link: HostLink
    campaign: Callable[[], Campaign]  # as it stands: the file's, with the fleet wanted now
    started_at: Callable[[], float | None]  # the first start: the deadline counts from it

    async def decide(self, now: float) -> list[Decision]:
        """The rules' decisions this poll: on the snapshot; again on offers searched fresh when they
        would create; under the auto tier, on on-demand offers when the bid search ran dry."""
        can_create = self.fleet.creates < self.campaign().max_creates
        swaps, bidding = self.job_work.swaps, self.tier.terms(now)
        if swaps.wants_search(now, self.offer_book, can_create):
            self.offer_book.rental = bidding.tier if bidding else "on-demand"
            await self.offer_book.refresh()
        swaps.look(now, self.offer_book, can_create, bidding)  # slow hosts (core/swap)
        snap = self.snapshot(now)
        if self._would_create(snap, now):
            return (await self.on_offers(now))[1]
        return decide(snap, self.policy, now)

    async def on_offers(
        self, now: float, first_alone: bool = True
    ) -> tuple[FleetSnapshot, list[Decision]]:
        """The rules' decisions on offers searched fresh, and the snapshot they were made on.
        `first_alone`: a market not searched yet gets one create this poll (the first answer
        tests the key, the image and the offers before a fleet). Under `rental = "auto"`, a bid
        search with nothing to bid on is decided again on on-demand offers."""
        bidding = self.tier.terms(now)
        cap = 1 if first_alone and not self.offer_book.offers else None
        snap = await self._with_offers(now, bidding, cap)
        out = decide(snap, self.policy, now)
        if bidding is not None and tier_ran_dry(bidding, out):
            snap = await self._with_offers(now, dataclasses.replace(bidding, tier="on-demand"), cap)
            out = decide(snap, self.policy, now)
        return snap, out

    def _would_create(self, snap: FleetSnapshot, now: float) -> bool:
        """Would the rules create, offers aside? (then a search is worth its call)"""
        probe = dataclasses.replace(snap, offers=None, offers_available=1_000_000)
        return any(isinstance(d, Create) for d in decide(probe, self.policy, now))

    async def _with_offers(
        self, now: float, bidding: BidTerms | None, cap: int | None
    ) -> FleetSnapshot:
        """The snapshot on offers of `bidding`'s tier, searched again if stale, with our record of
        each machine."""
        self.offer_book.rental = bidding.tier if bidding else "on-demand"
        if self.offer_book.stale():
            await self.offer_book.refresh()
        return dataclasses.replace(
            self.snapshot(now),
            history=self.offer_book.history(),
            memory=self.offer_book.memory(),
            work=self._outlook(),
            create_cap=cap,
            bidding=bidding,
        )

    def _outlook(self) -> WorkOutlook | None:
        """What ranking by delivered work needs."""
        return self.offer_book.work_outlook(self.job_work.left(), self.campaign().fleet)

    def _free_since(self, a: Attempt) -> float | None:
        """Since when it has had no job; a person's start holds that off for `HUMAN_RECENT_S`."""
        free = self.job_work.queue.free_since(a.instance_id, a.life.last(Phase.VERIFIED))
        if free is not None and a.human_at is not None and a.human_act == STARTED_BY_PERSON:
            return max(free, a.human_at + HUMAN_RECENT_S)
        return free

    def snapshot(self, now: float) -> FleetSnapshot:
        """Everything the rules decide on, in one immutable value (the machine record, a
        ledger read, is added by `decide` only when a create is in view)."""
        campaign = self.campaign()
        deadline = None
        if campaign.deadline_min is not None:
            deadline = (self.started_at() or now) + campaign.deadline_min * 60
        jobs = self.job_work.queue
        alive = tuple(
            a.view(busy=jobs.holds(a.instance_id), free_since=self._free_since(a))
            for a in self.fleet.to_decide()
        )
        book = self.offer_book
        return FleetSnapshot(
            fleet=campaign.fleet,
            jobs_pending=jobs.pending,
            jobs_running=jobs.running,
            jobs_total=jobs.total,
            jobs_failed=sum(1 for j in jobs.jobs if j.status == "failed"),
            max_creates=campaign.max_creates,
            creates=self.fleet.creates,
            budget_usd=campaign.budget_usd,
            spent_usd=self.fleet.spent(self.market.gpu_billing, now),
            attempts=alive,
            deadline=deadline,
            offers=book.offers,
            terms=book.terms(),
            exclusions=book.exclusions(),
            blame=self.blame_book.view(),
            slow=dict(self.job_work.swaps.slow),
            moving=self.job_work.swaps.moving(),
            bidding=self.tier.terms(now),
            destroys_due=self.fleet.destroys_due(),
            io_floor_s=min(self.policy.io_floor_wall_s, self.link.io_floor())
            * float(self.market.time_scale),
        )
