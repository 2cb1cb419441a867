"""The offer book: the last offer search's answer, when to search again, and what the offer choice
needs (the terms, the machines to skip, our record of each machine)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.campaign import Campaign, Job
from ..core.delivery import WorkOutlook, outlook
from ..core.models import Offer
from ..core.offers.choice import Exclusions, History, OfferTerms, choose_offers, fit_offers
from ..core.offers.track_record import Memory, remember
from ..core.offers.work_cost import detect_h, detect_prior_h
from ..core.policy import Policy
from ..ledger import Ledger
from ..market.errors import REFUSALS
from ..market.protocol import Market
from .fleet import Fleet
from .journal import Journal

OFFERS_FRESH_S = 60.0  # market seconds a search is reused while it still has a fit offer


@dataclass(eq=False)
class OfferBook:
    market: Market
    ledger: Ledger
    journal: Journal
    fleet: Fleet
    campaign: Campaign
    policy: Policy
    # None: never searched (or every search failed)
    offers: tuple[Offer, ...] | None = field(default=None, init=False)
    searched_at: float = field(default=-1e18, init=False)
    # the tier searched for (bidding.tier_for, set before each search): "interruptible"
    # searches type bid, whose offers carry bid_floor
    rental: str = field(default="on-demand", init=False)
    searched_rental: str = field(default="on-demand", init=False)

    def terms(self) -> OfferTerms:
        return OfferTerms(self.campaign.max_dph, self.campaign.image_cuda)

    def exclusions(self) -> Exclusions:
        return Exclusions(
            frozenset(self.fleet.quarantine),
            self.fleet.held_machines(),
            frozenset(self.fleet.recent_failures),
            frozenset(self.fleet.team_quarantine),
        )

    def remembered(self) -> Memory:
        """Our faded record of every rental this ledger knows, earlier campaigns' included
        (with a team's duds added: `Ledger.team_rentals`), as of the market's now."""
        return remember(
            self.ledger.team_rentals(), self.market.now(), self.policy.memory_half_life_h
        )

    def memory(self) -> Memory | None:
        """The faded record, for a policy that ranks by it (None otherwise)."""
        return self.remembered() if self.policy.rank == "expected_cost" else None

    def history(self) -> History:
        """Our own record per machine, faded, read only when the policy ranks by it."""
        return self.remembered().history() if self.policy.rank == "expected_cost" else {}

    def work_outlook(self, jobs: list[Job], hosts: int) -> WorkOutlook | None:
        """For sized jobs ranked by expected cost: our speeds, faded record and dud lives."""
        if self.policy.rank != "expected_cost" or not jobs:
            return None
        memory = self.remembered()
        p = self.policy
        prior = detect_prior_h(p.boot_deadline_s, max(p.preflight_deadline_s, p.ssh_deadline_s))
        dud_h = detect_h(prior, *memory.dud_life())
        return outlook(
            jobs,
            self.ledger.machine_speeds(),
            hosts,
            memory.model_counts(),
            dud_h,
            p.odds_prior_runs,
            memory,
        )

    def fit(self) -> list[Offer]:
        """The offers last searched that the campaign could rent now."""
        return fit_offers(self.offers or (), self.terms(), self.policy, self.exclusions())

    def stale(self) -> bool:
        return (
            self.offers is None
            or self.market.now() - self.searched_at >= OFFERS_FRESH_S
            or not self.fit()
            or self.rental != self.searched_rental
        )

    async def refresh(self) -> None:
        """Search again; a failed search is said and leaves the last answer in place."""
        try:
            found = await self.market.search_offers(
                self.campaign.offer_query,
                storage_gb=self.campaign.disk_gb,
                limit=1000,
                **({"rental": self.rental} if self.rental != "on-demand" else {}),
            )
        except REFUSALS as exc:
            self.journal.say(f"create skipped: offer search failed: {exc}")
            return
        self.offers, self.searched_at = tuple(found), self.market.now()
        self.searched_rental = self.rental

    def best(self) -> tuple[Offer, str] | None:
        p = self.policy
        chosen = choose_offers(
            self.fit(), 1, self.history(), p.rank, memory=self.memory(), strength=p.odds_prior_runs
        )
        return chosen[0] if chosen else None

    def tried(self, offer: Offer) -> None:
        """Tried once per search: refused or rented, it is not offered again."""
        self.offers = tuple(o for o in self.offers or () if o.id != offer.id)
