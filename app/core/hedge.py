"""Hedged provisioning: how many create attempts to keep in flight for a shortfall of hosts. Pure.

Where four creates in ten deliver, one at a time walks the market slowly; two per slot wastes
money among honest hosts. An extra attempt is added while what it saves in waiting (value of time
x the wait it shortens) exceeds what it costs (its bill as a dud, or idle once the fleet is
full). Attempts deliver independently with the offers' mean odds, and an unfilled slot waits one
more `round_h`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

from .offers.reputation import (
    ROUND_H,  # an attempt is verified or given up in about 15 minutes
)


@dataclass(frozen=True)
class HedgeInputs:
    need: int  # hosts still missing for the work (or the fleet)
    p_deliver: float  # mean odds that the offers about to be rented deliver
    value_of_time_usd_per_h: float  # the operator's price of an hour's wait for the whole work
    dud_usd: float  # what a dud bills before the rules give up on it
    surplus_usd: float  # what a delivering spare with nothing to do bills until stopped
    fleet: int  # the fleet size: the wait of one slot delays the work by about 1/fleet
    max_spares: int  # never more than this many attempts beyond the need
    round_h: float = ROUND_H


def expected_shortfall(k: int, need: int, p: float) -> float:
    """E[max(0, need - D)] with D ~ Binomial(k, p): slots still empty after one round."""
    return sum((need - d) * comb(k, d) * p**d * (1 - p) ** (k - d) for d in range(min(k, need) + 1))


def p_at_least(k: int, need: int, p: float) -> float:
    """P(D >= need): the fleet fills from the first k attempts."""
    return sum(comb(k, d) * p**d * (1 - p) ** (k - d) for d in range(need, k + 1))


def spare_attempts(h: HedgeInputs) -> tuple[int, str]:
    """How many attempts beyond `need` to keep in flight, with the sentence that says why."""
    if h.need <= 0 or h.max_spares <= 0 or h.value_of_time_usd_per_h <= 0:
        return 0, "no hedging"
    p = min(0.99, max(0.01, h.p_deliver))
    per_slot_h = h.round_h / max(1, h.fleet)
    k = h.need
    gain = cost = 0.0
    while k < h.need + h.max_spares:
        gain = (
            h.value_of_time_usd_per_h
            * per_slot_h
            * (expected_shortfall(k, h.need, p) - expected_shortfall(k + 1, h.need, p))
        )
        cost = (1 - p) * h.dud_usd + p * p_at_least(k, h.need, p) * h.surplus_usd
        if gain <= cost:
            break
        k += 1
    spares = k - h.need
    return spares, (
        f"{spares} spare(s) for {h.need} missing at p(deliver)={p:.2f} and "
        f"${h.value_of_time_usd_per_h:g}/h of waiting"
    )


def mean_odds(odds: Sequence[float], default: float) -> float:
    return sum(odds) / len(odds) if odds else default
