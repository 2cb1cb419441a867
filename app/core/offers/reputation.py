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


def p_deliver(good: float, bad: float, platform_score: float | None) -> float:
    """Beta-Bernoulli: prior mean from the platform's reliability (weak), updated by our runs."""
    prior_mean = (
        0.4 if platform_score is None else min(0.9, max(0.1, 0.4 + (platform_score - 0.95)))
    )
    alpha = prior_mean * PRIOR_STRENGTH + good
    beta = (1 - prior_mean) * PRIOR_STRENGTH + bad
    return alpha / (alpha + beta)


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
    """p(deliver) of one offer for hedging: its machine's own record, over a prior that is the
    market's pooled record when there is one (a new machine on a market where most creates fail
    is likely to fail too), else the platform's score."""
    good, bad, _ = record or (0, 0, 0.0)
    if pool is None:
        return p_deliver(good, bad, platform_score)
    return (pool * PRIOR_STRENGTH + good) / (PRIOR_STRENGTH + good + bad)


ROUND_H = 0.25  # an attempt is verified or given up in about 15 market minutes


def delivered_hour_usd(
    dph: float, record: tuple[float, float, float] | None, pool: float | None
) -> tuple[float, float]:
    """The expected USD per delivered hour of an offer at `dph` on a machine with `record`
    (delivered, failed, mean USD per dud; None: never rented), and its odds of delivering:
    the price over the odds, plus the expected cost of the duds before a delivery. The odds
    read only our own record (the machine's, over the market's pooled `pool`), as the
    ranking by expected cost does."""
    good, bad, dud_usd = record or (0, 0, 0.0)
    p = offer_odds((good, bad, dud_usd), None, pool)
    return usd_at_odds(dph, p, dud_usd), p


def usd_at_odds(dph: float, p: float, dud_usd: float) -> float:
    """The expected USD per delivered hour at `dph` with odds `p`: the price over the odds, plus
    the expected cost of the duds before a delivery (`dud_usd` each, our default before the
    ledger knows one)."""
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
    """Offers best first, each with the sentence the ledger records for the choice.

    `history`: machine id -> (delivered, failed, mean USD per dud). `by="price"` ranks by the
    hourly rate (the article's way); `by="expected_cost"` by price over the delivery odds plus
    the expected cost of a dud on that machine, plus, when waiting has a price, the expected
    wait for a verified host from that machine (a round per try, 1/p tries) at that price.
    The odds read only our own record (each machine's, over the market's pooled one; a flat
    prior before any rental ended): the platform's score says little about delivery (DESIGN
    rule 6), and ranking by it made `default` rent pricier hosts for the same work on markets
    it had not seen (docs/benchmarks.md). So on a market we know nothing of, the ranking is by
    price, as the article's; our ledger reorders it. With our faded delivery record (`memory`)
    the odds are `Memory.odds`: the machine's over its host's, its price band's, its model's
    and the pool's, the pool weighed against `strength` rentals.
    """
    pool = market_odds(history)
    scored = []
    for o in offers:
        good, bad, dud_usd = history.get(o.machine_id, (0, 0, 0.0))
        runs = round(good + bad, 1)  # rentals' worth, faded
        if by == "expected_cost":
            effective, p = delivered_hour_usd(o.dph_total, (good, bad, dud_usd), pool)
            if memory is not None:
                p = memory.odds(o.gpu_name, o.dph_total, o.machine_id, o.host_id, strength)
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
