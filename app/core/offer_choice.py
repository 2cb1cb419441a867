"""Which offer to rent, and what to quarantine: pure, so `decide()` returns complete decisions.

Fit: under the campaign's price ceiling, CUDA new enough for the image, a finite price that is
not negative (a market answer is evidence, not truth), not a quarantined machine, not one we
hold, not one that just failed. Sanity (policy `offer_sanity`): the offer's own benchmark does
not contradict the GPU it claims, and its driver can run the image. Ranking: by price, or by
expected cost from our own ledger (see `reputation.rank_offers`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .gpu_specs import driver_too_old, offer_contradicts_itself
from .models import Offer
from .policy import Policy
from .reputation import rank_offers

History = dict[int, tuple[int, int, float]]  # machine id -> (delivered, duds, mean dud USD)


@dataclass(frozen=True)
class OfferTerms:
    """What the campaign asks of an offer."""

    max_dph: float
    image_cuda: float


@dataclass(frozen=True)
class Exclusions:
    """Machines not to rent now."""

    quarantined: frozenset[int] = frozenset()
    held: frozenset[int] = frozenset()
    recent_failures: frozenset[int] = frozenset()

    def __contains__(self, machine_id: object) -> bool:
        return (
            machine_id in self.quarantined
            or machine_id in self.held
            or machine_id in self.recent_failures
        )


@dataclass(frozen=True)
class Quarantine:
    """A machine not to be rented again: within the campaign, or ledger-wide until `until`."""

    machine_id: int
    reason: str
    failure_class: str
    scope: str  # "campaign" | "ledger"
    until: float | None = None  # market time it lapses; None: never (or the campaign's end)


def price_sane(o: Offer) -> bool:
    return all(math.isfinite(p) and p >= 0 for p in (o.dph_total, o.dph_base))


def fit_offers(
    offers: Sequence[Offer], terms: OfferTerms, policy: Policy, skip: Exclusions
) -> list[Offer]:
    return [
        o
        for o in offers
        if price_sane(o)
        and o.dph_total <= terms.max_dph
        and (o.cuda_max_good is None or o.cuda_max_good >= terms.image_cuda)
        and o.machine_id not in skip
        and not (
            policy.offer_sanity
            and (
                offer_contradicts_itself(o.gpu_name, o.dlperf)
                or driver_too_old(o.driver_version, terms.image_cuda)
            )
        )
    ]


def choose_offers(
    fit: Sequence[Offer], n: int, history: History, by: str
) -> list[tuple[Offer, str]]:
    """The best `n` offers, one per machine, each with the sentence the ledger records."""
    out: list[tuple[Offer, str]] = []
    taken: set[int] = set()
    for o, why in rank_offers(fit, history, by=by):
        if len(out) >= n:
            break
        if o.machine_id in taken:
            continue
        taken.add(o.machine_id)
        out.append((o, why))
    return out


def quarantine_for(
    policy: Policy,
    machine_id: int | None,
    failure_class: str | None,
    reason: str,
    now: float,
    already: Collection[int] = (),
) -> Quarantine | None:
    """The quarantine a failure earns under `policy` (None: none). A cancelled attempt says
    nothing about its host; a machine already quarantined is not quarantined twice."""
    if (
        not policy.quarantine
        or machine_id is None
        or failure_class is None
        or failure_class == "cancelled"
        or machine_id in already
    ):
        return None
    until = (
        now + policy.quarantine_hours * 3600
        if policy.quarantine_persistent and policy.quarantine_hours
        else None
    )
    scope = "ledger" if policy.quarantine_persistent else "campaign"
    return Quarantine(machine_id, reason, failure_class, scope, until)


def at_risk(dph: float, created_at: float, boot_deadline_s: float, now: float) -> float:
    """What an attempt that has not proven itself may still bill before the boot rules give up
    on it: its hourly price over what is left of the boot deadline."""
    left = max(0.0, boot_deadline_s - max(0.0, now - created_at))
    return max(0.0, dph) * left / 3600


def within_budget(
    chosen: Sequence[tuple[Offer, str]], committed: float, budget: float, policy: Policy, now: float
) -> list[tuple[Offer | None, str]]:
    """The creates the budget can carry: `committed` (spent, plus what every unproven attempt
    in flight may still bill) and what each new one may bill stay within the budget."""
    out: list[tuple[Offer | None, str]] = []
    for offer, why in chosen:
        cost = at_risk(offer.dph_total, now, policy.boot_deadline_s, now)
        if committed + cost > budget:
            break
        committed += cost
        out.append((offer, why))
    return out
