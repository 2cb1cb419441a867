"""How far the platform's listed reliability tells our duds apart on this market, measured on our
own rentals: a logistic fit of delivered against the score each offer listed when we rented it.
Pure. The score is not trusted (DESIGN rule 6): it moves the odds only as far as our ledger has
seen it predict delivery, and only down (`ListedFit.lift`); a prior holds the slope towards zero,
so a handful of rentals cannot make it steep."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

STEP = 0.01  # the slope is per this much listed reliability
SLOPE_PRIOR = 4.0  # ridge on the slope: a prior of zero with sd 0.5 logit per STEP
LEVEL_PRIOR = 0.1  # a weak ridge on the intercept, so one-sided evidence stays finite
MAX_LIFT = 1.0  # logits the score may take off one offer's odds (0.5 -> 0.27)
NEWTON_STEPS = 30


@dataclass(frozen=True)
class ListedFit:
    """Logit of p(deliver) per STEP of listed reliability, about `centre` (our rentals' mean)."""

    slope: float = 0.0
    centre: float = 0.0

    def lift(self, reliability: float | None) -> float:
        """Logits an offer listing `reliability` sits below our average rental (0: not below).
        Only ever down: a score never lifts a stranger over the odds its model and price band
        give it, so a machine we saw deliver keeps its place above any stranger at its price."""
        if reliability is None or not math.isfinite(reliability) or self.slope == 0.0:
            return 0.0
        x = self.slope * (reliability - self.centre) / STEP
        return max(-MAX_LIFT, min(0.0, x))

    def adjust(self, p: float, reliability: float | None) -> float:
        """`p` moved by the offer's lift on the logit scale."""
        lift = self.lift(reliability)
        if lift == 0.0:
            return p
        p = min(1 - 1e-6, max(1e-6, p))
        return 1 / (1 + math.exp(-(math.log(p / (1 - p)) + lift)))


def fit(points: Sequence[tuple[float, float, float]]) -> ListedFit:
    """The fit over `points`: (listed reliability, delivered, failed), each in rentals' worth
    (faded). No fit (a flat one) before a delivery and a failure are both on record."""
    pts = [(r, g, f) for r, g, f in points if math.isfinite(r) and g + f > 0]
    good = sum(g for _, g, _ in pts)
    bad = sum(f for _, _, f in pts)
    if good <= 0 or bad <= 0:
        return ListedFit()
    centre = sum(r * (g + f) for r, g, f in pts) / (good + bad)
    xs = [((r - centre) / STEP, g, f) for r, g, f in pts]
    a = b = 0.0
    for _ in range(NEWTON_STEPS):
        ga, gb = -LEVEL_PRIOR * a, -SLOPE_PRIOR * b
        haa, hab, hbb = -LEVEL_PRIOR, 0.0, -SLOPE_PRIOR
        for x, g, f in xs:
            p = 1 / (1 + math.exp(-max(-30.0, min(30.0, a + b * x))))
            n = g + f
            ga += g - n * p
            gb += (g - n * p) * x
            w = n * p * (1 - p)
            haa -= w
            hab -= w * x
            hbb -= w * x * x
        det = haa * hbb - hab * hab
        if det <= 0:
            break
        da = (hbb * ga - hab * gb) / det
        db = (haa * gb - hab * ga) / det
        a, b = a - da, b - db
        if abs(da) + abs(db) < 1e-9:
            break
    if b <= 0:  # higher scores did not deliver more: the score says nothing we may use
        return ListedFit()
    return ListedFit(b, centre)
