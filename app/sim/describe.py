"""What a family drew (`rentwatch scenario describe`, DESIGN.md's keys): one summary of all its
markets' offers over one fixed market day."""

from __future__ import annotations

import statistics
from typing import Any

from . import bids, churn
from .clock import SimClock
from .family import UNKNOWNS, draw_family
from .machines import Machine
from .market import SimMarket
from .scenario import Churn

DAY_START = 1_768_953_600.0  # 2026-01-21 00:00 UTC: the day the scraper in the evidence ran
DAY_S = 86_400.0
BID_SAMPLES_H = (3.0, 11.0, 19.0)  # hours of the day at which each offer's min_bid is read


def _r(x: float) -> float:
    return round(x, 4)


def _spread(values: list[float], prefix: str = "") -> dict[str, float]:
    """The 10th percentile, the median and the 90th (inclusive, interpolated)."""
    pct = statistics.quantiles(values, n=100, method="inclusive") if values[1:] else values * 99
    cuts = {"p10": pct[9], "median": statistics.median(values), "p90": pct[89]}
    return {prefix + k: _r(v) for k, v in cuts.items()}


def _id_changed(seed: int, c: Churn, m: Machine) -> bool:
    w = c.window_min * 60.0
    ids = {
        churn.offer_id_at(seed, c, m, k * w)
        for k in range(churn.window(c, DAY_START), churn.window(c, DAY_START + DAY_S) + 1)
        if churn.listed(seed, c, m, k * w)
    }
    return len(ids) > 1


def describe_family(family_seed: int, n: int) -> dict[str, Any]:
    prices: dict[str, list[float]] = {}
    bid_share: list[float] = []
    storage: list[float] = []
    presence: list[float] = []
    kinds = {"verified": 0, "deverified": 0, "unverified": 0}
    pressures: list[float] = []
    id_changes = False
    markets = draw_family(family_seed, n)
    for fm in markets:
        sc, clock = fm.scenario, SimClock(1.0, origin=DAY_START)
        clock.stepped()
        market = SimMarket(sc, clock)  # each machine's presence drawn as the market draws it
        pressures += [sc.bids.pressure_for(g) for c in sc.host_classes for g in c.gpu]
        for m in market.machines + market.others:
            # per GPU, as DESIGN.md has it: a multi-GPU machine lists the price of all its GPUs
            prices.setdefault(m.advertised_gpu, []).append(m.dph_base / m.num_gpus)
            storage.append(m.storage_cost)
            kinds[m.verification] += 1
            presence.append(churn.listed_share(sc.seed, sc.churn, m, DAY_START, DAY_START + DAY_S))
            id_changes = id_changes or _id_changed(sc.seed, sc.churn, m)
            for h in BID_SAMPLES_H:
                t = DAY_START + h * 3600.0
                if not churn.listed(sc.seed, sc.churn, m, t):
                    continue
                q = bids.quote(sc.seed, sc.bids, m, t)
                if q is not None and m.dph_base > 0:
                    bid_share.append(q / m.dph_base)
    rows = sum(kinds.values())
    return {
        "markets": len(markets),
        "offers": rows,
        "models": {g: {"n": len(v)} | _spread(v, "dph_") for g, v in sorted(prices.items())},
        "min_bid_share": _spread(bid_share)
        | {
            "above_0_9": _r(sum(x > 0.9 for x in bid_share) / len(bid_share)),
            "below_0_5": _r(sum(x < 0.5 for x in bid_share) / len(bid_share)),
        },
        "storage_usd_gb_month": {
            "min": min(storage),
            "median": _r(statistics.median(storage)),
            "max": max(storage),
        },
        "verified_share": _r(kinds["verified"] / rows),
        "deverified_share": _r(kinds["deverified"] / rows),
        "unverified_share": _r(kinds["unverified"] / rows),
        "offer_presence_median": _r(statistics.median(presence)),
        "offer_id_changes_on_relist": id_changes,
        "outbid_per_machine_hour": {"min": _r(min(pressures)), "max": _r(max(pressures))},
        "unknowns": {name: {**u, "range": list(u["range"])} for name, u in UNKNOWNS.items()},
    }


def format_description(d: dict[str, Any], family_seed: int) -> str:
    mb, st, ob = d["min_bid_share"], d["storage_usd_gb_month"], d["outbid_per_machine_hour"]
    lines = [
        f"family seed {family_seed}: {d['markets']} markets, {d['offers']} offers",
        "",
        f"{'model':<12} {'n':>5} {'$/h p10':>8} {'median':>8} {'p90':>8}",
    ]
    for g, row in d["models"].items():
        lines.append(
            f"{g:<12} {row['n']:>5} {row['dph_p10']:>8.3f} {row['dph_median']:>8.3f}"
            f" {row['dph_p90']:>8.3f}"
        )
    lines += [
        "",
        f"min_bid / on-demand   p10 {mb['p10']:.2f}  median {mb['median']:.2f}  "
        f"p90 {mb['p90']:.2f}  above 0.9 {mb['above_0_9']:.0%}  below 0.5 {mb['below_0_5']:.0%}",
        f"storage $/GB-month    min {st['min']:.4f}  median {st['median']:.3f}  "
        f"max {st['max']:.3f}",
        f"verification          verified {d['verified_share']:.0%}  "
        f"deverified {d['deverified_share']:.0%}  unverified {d['unverified_share']:.0%}",
        f"listed, median offer  {d['offer_presence_median']:.0%} of the day; offer id changes "
        f"on relist: {'yes' if d['offer_id_changes_on_relist'] else 'no'}",
        f"bid rivals per machine-hour  {ob['min']:.2f} to {ob['max']:.2f}",
        "",
        "assumed (no public source): range sampled, knob",
    ]
    for name, u in d["unknowns"].items():
        sep = " or " if any(isinstance(x, str) for x in u["range"]) else " to "
        rng = sep.join(str(x) for x in u["range"])
        lines.append(f"  {name:<22} {rng:<22} {u['knob']}")
    return "\n".join(lines)
