"""The `[bids]` table of a fitted scenario: how hard other renters pressed on the operator's own bid
rentals, from the ledger's own record (nothing here is the market's word): the floor each bid
create saw, the outbids per hour per model over the chance a rival beats our bid, and how long an
outbid held a rental paused with no rebid of ours between."""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..core.text import clean
from ..ledger import Ledger
from ..sim.scenario_tables import Bids

MIN_HOURS = 1.0  # a model's outbid rate is fitted only from this many hours on a bid
MIN_BEAT = 0.05  # never divide by a chance of being beaten under this
SIMULATED = Bids()  # the simulator's rivals, as `beaten` reads them by default


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) and v > 0 else None


def _spread(values: list[float], hi: float) -> list[float] | None:
    """The 10th-90th percentile range, rounded, within (0, hi]."""
    vals = sorted(v for v in values if 0 < v <= hi)
    if not vals:
        return None
    lo = vals[int(len(vals) * 0.1)] if len(vals) > 3 else vals[0]
    top = vals[min(len(vals) - 1, int(len(vals) * 0.9))] if len(vals) > 3 else vals[-1]
    lo, top = max(0.01, round(lo, 2)), min(hi, round(top, 2))
    return [lo, max(lo, top)]


def beaten(bid_over_floor: float, bids: Bids = SIMULATED) -> float:
    """The chance that one rival beats a bid this many times the floor: an on-demand rival
    always does, a bidding one when its draw from `rival_bid` is higher."""
    lo, hi = bids.rival_bid
    above = min(1.0, max(0.0, (hi - bid_over_floor) / (hi - lo))) if hi > lo else 0.0
    return bids.ondemand + (1 - bids.ondemand) * above


def fit_bids(ledger: Ledger, campaign: str | None = None) -> dict[str, Any] | None:
    """The `[bids]` table from the ledger's bid rentals (of `campaign`, else all); None: none."""
    creates = [
        e
        for e in ledger.events(where="kind = 'create' AND phase <> 'intent' AND ok")
        if (campaign is None or e.campaign == campaign) and _finite(e.detail.get("bid"))
    ]
    if not creates:
        return None
    floors, over = [], []
    for e in creates:
        bid, low, od = (_finite(e.detail.get(k)) for k in ("bid", "bid_floor", "on_demand_dph"))
        if low is not None and od is not None:
            floors.append(low / od)
        if bid is not None and low is not None:
            over.append(bid / low)
    beat = max(MIN_BEAT, beaten(statistics.median(over) if over else 1.0))
    ours = {(e.machine_id, e.gpu_name) for e in creates}
    hours: dict[str, list[float]] = {}
    for machine, gpu, run_h, outbids in ledger.bid_exposure():
        if campaign is None or (machine, gpu) in ours:
            # GPU names come from the market: cleaned, as the simulator reads the file back
            h = hours.setdefault(clean(gpu, 60).strip() or "unknown", [0.0, 0.0])
            h[0] += max(0.0, run_h) if math.isfinite(run_h) else 0.0
            h[1] += max(0, outbids)
    out: dict[str, Any] = {}
    if spread := _spread(floors, 1.0):
        out["floor"] = spread
    fitted = {g: round(min(60.0, n / h / beat), 3) for g, (h, n) in hours.items() if h >= MIN_HOURS}
    if fitted:
        run_h = sum(h for h, _ in hours.values())
        out["pressure"] = round(min(60.0, sum(n for _, n in hours.values()) / run_h / beat), 3)
        out["gpu_pressure"] = dict(sorted(fitted.items()))
    rebids: dict[int | None, list[float]] = {}
    for e in ledger.events(where="kind = 'rebid' AND coalesce(ok, true)"):
        rebids.setdefault(e.instance_id, []).append(e.at)
    paused = []
    for e in ledger.events(where="kind = 'resumed'"):
        p = _finite(e.detail.get("paused_s"))
        if p is None or campaign not in (None, e.campaign):
            continue
        if not any(e.at - p <= t <= e.at for t in rebids.get(e.instance_id, ())):
            paused.append(p / 60)
    if spread := _spread(paused, 7 * 1440.0):
        out["hold_min"] = spread
    return out
