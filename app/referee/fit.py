"""`rentwatch scenario from-ledger`: a scenario fitted to a real campaign's ledger, so an operator
can referee policy changes against their own market's history; its `[bids]` table from the
operator's own bid rentals (`fit_bids`)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..core.preflight.verdict import finite
from ..core.text import clean
from ..ledger import Ledger
from ..sim.scenario import Bids
from ..sim.scenario import to_toml as scenario_toml

MIN_HOURS = 1.0  # a model's outbid rate is fitted only from this many hours on a bid
MIN_BEAT = 0.05  # never divide by a chance of being beaten under this
SIMULATED = Bids()  # the simulator's rivals, as `beaten` reads them by default

CLASS_TO_BEHAVIOUR = {
    "freeze": "freeze_pull",
    "boot_timeout": "freeze_pull",
    "fatal": "fatal_pull",
    "exited": "exited",
    "unknown": "exited",
    "offline": "offline_midrun",
    "cuda_error": "stale_driver",
    "wrong_result": "stale_driver",
    "wrong_gpu": "misreported",
    "too_slow": "misreported",
    "ssh_dead": "ssh_dead",
    "timeout": "ssh_dead",
}


def fit_scenario(ledger: Ledger, campaign: str | None = None, seed: int = 7) -> dict[str, Any]:
    rows = ledger.instance_rows(campaign)
    if not rows:
        raise ValueError("the ledger holds no creates to fit a scenario from")
    throttled = ledger.throttled_instances()
    counts: dict[str, int] = {}
    boots: list[float] = []
    prices = [float(r["gpu_dph"]) for r in rows if r["gpu_dph"] is not None]
    # GPU names come from the market: cleaned, so the file is one the simulator reads back
    gpus = sorted({g for g in (clean(r["gpu_name"], 60).strip() for r in rows) if g})
    for r in rows:
        if r["verified_at"] is not None:
            behaviour = "throttled" if r["instance_id"] in throttled else "healthy"
        elif r["dud"] and r["failure_class"] in CLASS_TO_BEHAVIOUR:
            behaviour = CLASS_TO_BEHAVIOUR[r["failure_class"]]
        else:
            continue  # a dud cancelled at the end (or a live one) says nothing about its host
        counts[behaviour] = counts.get(behaviour, 0) + 1
        if r["running_at"] is not None and r["created_at"] is not None:
            boots.append((float(r["running_at"]) - float(r["created_at"])) / 60)
    total = sum(counts.values()) or 1
    boot = _spread(boots, 0.1)
    classes = []
    for behaviour, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        hc: dict[str, Any] = {
            "behaviour": behaviour,
            "share": round(n / total, 3),
            "gpu": gpus or ["RTX 3090"],
            "dph": _spread(prices, 0.01) or [0.1, 0.5],
        }
        if boot:
            # the simulator's boot = queue + pull + extraction + start; give the pull most of it
            hc["pull_min"] = [round(boot[0] * 0.7, 2), round(max(boot[1] * 0.7, boot[0] * 0.7), 2)]
        classes.append(hc)
    data: dict[str, Any] = {
        "name": clean(f"fitted-{campaign or 'all'}", 120),
        "seed": seed,
        "time_scale": 60,
        "offers": max(20, len(rows)),
        "gpu_billing": "created",
        "host_class": classes,
    }
    bids = fit_bids(ledger, campaign)
    if bids:  # the interruptible tier's pressure, where the operator rented on it
        data["bids"] = bids
    return data


def to_toml(data: dict[str, Any]) -> str:
    return scenario_toml(data, "fitted by `rentwatch scenario from-ledger`")


def _positive(v: Any) -> float | None:
    n = finite(v)  # an integer past a float's range is no number either
    return n if n is not None and n > 0 else None


def _spread(values: list[float], least: float, most: float = math.inf) -> list[float] | None:
    """The 10th-90th percentile range of the values in [0, most], rounded, never under `least`;
    None: no such value (the market's numbers are evidence: NaN says nothing of a price)."""
    vals = sorted(v for v in values if math.isfinite(v) and 0 <= v <= most)
    if not vals:
        return None
    n = len(vals)
    lo, top = (vals[int(n * 0.1)], vals[int(n * 0.9)]) if n > 3 else (vals[0], vals[-1])
    lo = max(least, round(lo, 2))
    return [lo, max(lo, min(most, round(top, 2)))]


def beaten(bid_over_floor: float, bids: Bids = SIMULATED) -> float:
    """The chance that one rival beats a bid this many times the floor: an on-demand rival
    always does, a bidding one when its draw from `rival_bid` is higher."""
    lo, hi = bids.rival_bid
    above = min(1.0, max(0.0, (hi - bid_over_floor) / (hi - lo))) if hi > lo else 0.0
    return bids.ondemand + (1 - bids.ondemand) * above


def fit_bids(ledger: Ledger, campaign: str | None = None) -> dict[str, Any] | None:
    """The `[bids]` table from the ledger's bid rentals (of `campaign`, else all); None: none.
    How hard other renters pressed on the operator's own bid rentals, from the ledger's own
    record (nothing here is the market's word): the floor each bid create saw, the outbids per
    hour per model over the chance a rival beats our bid, and how long an outbid held a rental
    paused with no rebid of ours between."""
    creates = [
        e
        for e in ledger.events(where="kind = 'create' AND phase <> 'intent' AND ok")
        if (campaign is None or e.campaign == campaign) and _positive(e.detail.get("bid"))
    ]
    if not creates:
        return None
    floors, over = [], []
    for e in creates:
        bid, low, od = (_positive(e.detail.get(k)) for k in ("bid", "bid_floor", "on_demand_dph"))
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
    if spread := _spread(floors, 0.01, 1.0):
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
        p = _positive(e.detail.get("paused_s"))
        if p is None or campaign not in (None, e.campaign):
            continue
        if not any(e.at - p <= t <= e.at for t in rebids.get(e.instance_id, ())):
            paused.append(p / 60)
    if spread := _spread(paused, 0.01, 7 * 1440.0):
        out["hold_min"] = spread
    return out
