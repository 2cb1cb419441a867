"""The offers the rules would rent, in order, each with its tier and price: what `decide()` ranks
its creates with and `rentwatch offers` shows, so the preview names the creates the rules return,
not a guess. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..bidding.rules import as_rented, offer_bid
from ..decisions import Create, Decision, FleetSnapshot
from ..models import Offer
from ..policy import Policy
from .choice import choose_offers, fit_of, work_scores


def rank_creates(
    fit: Sequence[Offer], n: int, fleet: FleetSnapshot, policy: Policy
) -> list[tuple[Offer, str]]:
    """The best `n` fit offers for the next creates, one per machine, each with the sentence
    the ledger records (`fleet.offers` already priced as rented)."""
    return choose_offers(
        fit,
        n,
        fleet.history,
        policy.rank,
        policy.value_of_time_usd_per_h,
        fleet.work,
        fleet.memory,
        policy.odds_prior_runs,
    )


@dataclass(frozen=True)
class Pick:
    """One offer as a create would rent it now."""

    listed: Offer  # as the search answered it
    paid: Offer  # priced as the create pays (`as_rented`): what the ranking read
    rank: int
    why: str  # the ranking's sentence (the ledger's `offer_chosen` reason)
    bid: float | None  # None: on-demand
    bid_why: str  # why that tier and bid ("" where the campaign does not bid)
    per_ref_h: float | None  # expected USD per delivered reference GPU-hour (sized jobs)
    first: bool  # among the creates `decide()` returns now

    @property
    def tier(self) -> str:
        return "on-demand" if self.bid is None else "interruptible"

    @property
    def on_demand_dph(self) -> float:
        return self.listed.gpu_dph


def picks(fleet: FleetSnapshot, policy: Policy, decided: Sequence[Decision]) -> list[Pick]:
    """Every fit offer in the order the rules would rent them, with tier and bid; `first` marks the
    offers of the creates in `decided`."""
    bidding = fleet.bidding
    rented = replace(fleet, offers=as_rented(fleet.offers, bidding))
    fit = fit_of(rented.offers, rented.terms, policy, rented.exclusions) or []
    ranked = rank_creates(fit, len(fit), rented, policy)
    first = {d.offer.id for d in decided if isinstance(d, Create) and d.offer is not None}
    per_ref: dict[int, float] = {}
    if fleet.work is not None and policy.rank == "expected_cost":
        scores = work_scores(fit, fleet.history, fleet.work, policy.value_of_time_usd_per_h)
        per_ref = {o.id: usd for usd, o, _ in scores}
    listed = {o.id: o for o in fleet.offers or ()}
    out = []
    for n, (o, why) in enumerate(ranked, 1):
        bid, bid_why = None, ""
        if bidding is not None and bidding.tier == "interruptible":
            bid, bid_why = offer_bid(o, bidding)
        out.append(Pick(listed[o.id], o, n, why, bid, bid_why, per_ref.get(o.id), o.id in first))
    return out
