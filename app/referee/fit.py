"""`rentwatch scenario from-ledger`: a scenario fitted to a real campaign's ledger, so an operator
can referee policy changes against their own market's history."""

from __future__ import annotations

import math
from typing import Any

from ..core.text import clean
from ..ledger import Ledger
from ..sim.scenario import to_toml as scenario_toml
from .fit_tier import fit_bids

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


def _range(values: list[float], lo_floor: float = 0.1) -> list[float]:
    # the market's numbers are evidence: NaN, infinities and negatives say nothing of a price
    vals = sorted(v for v in values if v is not None and math.isfinite(v) and v >= 0)
    if not vals:
        return []
    lo = vals[max(0, int(len(vals) * 0.1) - 1)] if len(vals) > 3 else vals[0]
    hi = vals[min(len(vals) - 1, int(len(vals) * 0.9))] if len(vals) > 3 else vals[-1]
    return [round(max(lo_floor, lo), 2), round(max(lo_floor, hi, lo), 2)]


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
    boot = _range(boots)
    classes = []
    for behaviour, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        hc: dict[str, Any] = {
            "behaviour": behaviour,
            "share": round(n / total, 3),
            "gpu": gpus or ["RTX 3090"],
            "dph": _range(prices, 0.01) or [0.1, 0.5],
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
