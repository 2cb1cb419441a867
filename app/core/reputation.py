"""Renter-side reputation and offer ranking: delivery odds from our own ledger, not the
platform's uptime score."""

from __future__ import annotations

from collections.abc import Sequence

from .models import Offer

PRIOR_STRENGTH = 2.0  # how many runs' worth the platform's score counts for
DEFAULT_DUD_USD = 0.07  # the article's cost of a dud, used until our ledger knows better


def p_deliver(good: int, bad: int, platform_score: float | None) -> float:
    """Beta-Bernoulli: prior mean from the platform's reliability (weak), updated by our runs."""
    prior_mean = (
        0.4 if platform_score is None else min(0.9, max(0.1, 0.4 + (platform_score - 0.95)))
    )
    alpha = prior_mean * PRIOR_STRENGTH + good
    beta = (1 - prior_mean) * PRIOR_STRENGTH + bad
    return alpha / (alpha + beta)


def rank_offers(
    offers: Sequence[Offer], history: dict[int, tuple[int, int, float]], by: str = "price"
) -> list[tuple[Offer, str]]:
    """Offers best first, each with the sentence the ledger records for the choice.

    `history`: machine id -> (delivered, failed, mean USD per dud). `by="price"` ranks by the
    hourly rate (the article's way); `by="expected_cost"` by price over the delivery odds plus
    the expected cost of a dud on that machine.
    """
    scored = []
    for o in offers:
        good, bad, dud_usd = history.get(o.machine_id, (0, 0, 0.0))
        p = p_deliver(good, bad, o.reliability)
        runs = good + bad
        if by == "expected_cost":
            effective = o.dph_total / p + (1 - p) / p * (dud_usd or DEFAULT_DUD_USD) * 4
            why = (
                f"m:{o.machine_id} ${o.dph_total:.3f}/h, p(deliver)={p:.2f} from {runs} run"
                f"{'s' if runs != 1 else ''}, effective ${effective:.3f}/h"
            )
        else:
            effective = o.dph_total
            why = f"m:{o.machine_id} cheapest fit offer at ${o.dph_total:.3f}/h"
        scored.append((effective, o.id, o, why))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [(o, why) for _, _, o, why in scored]
