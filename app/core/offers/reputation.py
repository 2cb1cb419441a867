"""Renter-side reputation and offer ranking: delivery odds from our own ledger, not the
platform's uptime score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..models import Offer

if TYPE_CHECKING:  # track_record reads work_cost, which reads this module
    from .track_record import Memory

PRIOR_STRENGTH = 2.0  # how many runs' worth the platform's score counts for
DEFAULT_DUD_USD = 0.07  # the article's cost of a dud, used until our ledger knows better


def market_odds(
    history: dict[int, tuple[float, float, float]], strength: float = PRIOR_STRENGTH
) -> float | None:
    """The share of our rentals on this market that delivered, over every machine in our
    ledger (shrunk towards the prior by `strength` runs); None before any run ended."""
    good = sum(g for g, _, _ in history.values())
    bad = sum(b for _, b, _ in history.values())
    if good + bad == 0:
        return None
    return (0.4 * strength + good) / (strength + good + bad)


def offer_odds(
    record: tuple[float, float, float] | None, platform_score: float | None, pool: float | None
) -> float:
    """p(deliver) of one offer for hedging, Beta-Bernoulli: its machine's record over the pool's,
    else over a weak prior from the platform's reliability."""
    good, bad, _ = record or (0, 0, 0.0)
    if pool is None:
        prior = 0.4 if platform_score is None else min(0.9, max(0.1, 0.4 + (platform_score - 0.95)))
        alpha, beta = prior * PRIOR_STRENGTH + good, (1 - prior) * PRIOR_STRENGTH + bad
        return alpha / (alpha + beta)
    return (pool * PRIOR_STRENGTH + good) / (PRIOR_STRENGTH + good + bad)


ROUND_H = 0.25  # an attempt is verified or given up in about 15 market minutes


def delivered_hour_usd(
    dph: float, record: tuple[float, float, float] | None, pool: float | None
) -> tuple[float, float]:
    """The expected USD per delivered hour of an offer at `dph` on a machine with `record`, and its
    odds of delivering, from our own record only (the machine's over the pool)."""
    good, bad, dud_usd = record or (0, 0, 0.0)
    p = offer_odds((good, bad, dud_usd), None, pool)
    return usd_at_odds(dph, p, dud_usd), p


def usd_at_odds(dph: float, p: float, dud_usd: float) -> float:
    """Expected USD per delivered hour at `dph` with odds `p`, each dud before it `dud_usd`."""
    p = max(p, 1e-3)
    return dph / p + (1 - p) / p * (dud_usd or DEFAULT_DUD_USD) * 4


def rank_offers(
    offers: Sequence[Offer],
    history: dict[int, tuple[float, float, float]],
    by: str = "price",
    value_of_time_usd_per_h: float = 0.0,
    memory: Memory | None = None,
    strength: float = PRIOR_STRENGTH,
) -> list[tuple[Offer, str]]:
    """Offers best first, each with the sentence the ledger records for the choice: by the hourly
    rate (`by="price"`), or by price over the delivery odds plus a dud's expected cost and the
    expected wait at the operator's price (`by="expected_cost"`).

    The odds read only our own record: the platform's score says little about delivery (DESIGN
    rule 6), and ranking by it rented pricier hosts for the same work (docs/benchmarks.md). On a
    market we know nothing of, the ranking is by price."""
    pool = market_odds(history)
    scored = []
    for o in offers:
        good, bad, dud_usd = history.get(o.machine_id, (0, 0, 0.0))
        runs = round(good + bad, 1)  # rentals' worth, faded
        if by == "expected_cost":
            effective, p = delivered_hour_usd(o.dph_total, (good, bad, dud_usd), pool)
            if memory is not None:
                p = memory.odds(
                    o.gpu_name, o.dph_total, o.machine_id, o.host_id, strength, o.reliability
                )
                effective = usd_at_odds(o.dph_total, p, dud_usd)
            if value_of_time_usd_per_h > 0 and pool is not None:
                effective += value_of_time_usd_per_h * ROUND_H / p
            why = (
                f"m:{o.machine_id} ${o.dph_total:.3f}/h, p(deliver)={p:.2f} from {runs:g} run"
                f"{'s' if runs != 1 else ''}, effective ${effective:.3f}/h"
            )
        else:
            effective = o.dph_total
            why = f"m:{o.machine_id} cheapest fit offer at ${o.dph_total:.3f}/h"
        scored.append((effective, o.id, o, why))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [(o, why) for _, _, o, why in scored]
