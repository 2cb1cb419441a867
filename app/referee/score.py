"""Scoring one referee run from the simulator's truth: what the policy paid, what the market
delivered, and when. Pure. "Delivering" is the simulator's behaviour table
(`app.sim.scenario.DELIVERING`); nothing else does useful work, whatever its status line says."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.lifecycle import Phase
from ..sim.scenario import DELIVERING

# The run's figures, in the order of the referee's JSON contract (docs/referee.md).
SCORE_KEYS = (
    "dud_usd",
    "duds",
    "dud_mean_lifetime_min",
    "false_kills",
    "time_to_fleet_min",
    "time_to_done_min",
    "jobs_finished",
    "total_usd",
    "usd_per_gpu_hour",
    "work_done",
    "usd_per_work_hour",
    "floor_usd",  # the run's honest floor (app/referee/floor.py), added beside the score
    "vs_floor",
)
# Keys where null means "never" (or "nothing delivered"): worse than any number.
NULL_IS_WORST = frozenset(
    {"time_to_fleet_min", "time_to_done_min", "usd_per_gpu_hour", "usd_per_work_hour", "vs_floor"}
)
RATIO_KEYS = {
    "dud_usd_vs_seed": "dud_usd",
    "time_to_fleet_vs_seed": "time_to_fleet_min",
    "time_to_done_vs_seed": "time_to_done_min",
    "total_usd_vs_seed": "total_usd",
    "usd_per_work_hour_vs_seed": "usd_per_work_hour",
}
EPS = 1e-6


@dataclass(frozen=True)
class RunFacts:
    """What the engine did in a run that the truth cannot say, read where the run ended: its
    window, the fleet asked for, each instance's phase moves (market time, phase entered) in
    order, and each job it saw finish, by (job, instance)."""

    start: float
    finish: float
    fleet: int
    moves: Mapping[int, tuple[tuple[float, Phase], ...]] = field(default_factory=dict)
    jobs_total: int = 0
    jobs_done: Mapping[tuple[str, int], float] = field(default_factory=dict)
    ended: str = ""  # the campaign's own reason for ending, or the referee's deadline

    @property
    def verified_at(self) -> dict[int, float]:
        """When the policy first called each instance verified."""
        firsts = {
            i: next((t for t, p in ms if p is Phase.VERIFIED), None) for i, ms in self.moves.items()
        }
        return {i: t for i, t in firsts.items() if t is not None}

    def done_on(self, good: set[int]) -> list[float]:
        """When each job the engine saw finish within the run, on one of `good`, finished."""
        return [at for (_, i), at in self.jobs_done.items() if i in good and at <= self.finish]


def delivers(row: Mapping[str, Any]) -> bool:
    """The sim's verdict on a machine (its own flag when served, else its behaviour table)."""
    flag = row.get("delivering")
    return bool(flag) if flag is not None else row["behaviour"] in DELIVERING


def _times(value: Any) -> list[float]:
    """A truth field that holds one market time, a list of them, or nothing."""
    items = value if isinstance(value, list) else [value]
    return [float(t) for t in items if isinstance(t, int | float)]


def market_had_stopped(row: Mapping[str, Any]) -> bool:
    """Stopped by the market when destroyed and not run since: the destroy killed no delivery."""
    gone = float(row["destroyed_at"])
    stops = [
        t
        for key in ("outbid_at", "bid_lost_at", "market_stopped_at", "expired_at")
        for t in _times(row.get(key))
        if t <= gone + EPS
    ]
    if not stops:
        return False
    return not any(max(stops) < t <= gone for t in _times(row.get("resumed_at")))


def _held_end(row: Mapping[str, Any], finish: float) -> float:
    """When it stopped working for the policy: destroyed, stopped, dark, or the run's end."""
    ends = [finish]
    for key in ("destroyed_at", "stopped_at", "offline_at"):
        if row.get(key) is not None:
            ends.append(float(row[key]))
    return min(ends)


def time_to_delivering_fleet(rows: Iterable[Mapping[str, Any]], facts: RunFacts) -> float | None:
    """Market seconds from the start until `fleet` instances on delivering machines were at once
    running (truth), verified by the policy and still held; None when that never happened."""
    spans: list[tuple[float, float]] = []
    verified_at = facts.verified_at
    for r in rows:
        verified = verified_at.get(int(r["id"])) if "id" in r else None
        if verified is None or r.get("running_at") is None or not delivers(r):
            continue
        begin = max(float(verified), float(r["running_at"]))
        end = _held_end(r, facts.finish)
        if begin <= end + EPS:
            spans.append((begin, end))
    for t, _ in sorted(spans):
        if sum(1 for b, e in spans if b <= t + EPS and t <= e + EPS) >= facts.fleet:
            return t - facts.start
    return None


def score(truth: Mapping[str, Any], facts: RunFacts) -> dict[str, Any]:
    """One run's figures from the truth: only instances created during the run count."""
    now = float(truth["now"])
    rows = [r for r in truth["instances"] if r["created_at"] >= facts.start - EPS]
    duds = [r for r in rows if not delivers(r) or r["running_at"] is None]
    # destroying a host that had already gone dark kills nothing that could still deliver,
    # nor does destroying one the market had stopped (outbid while it booted, say)
    false_kills = [
        r
        for r in rows
        if delivers(r)
        and r["destroyed_at"] is not None
        and r["destroyed_at"] < facts.finish - EPS
        and not (r.get("offline_at") is not None and r["offline_at"] <= r["destroyed_at"] + EPS)
        and not market_had_stopped(r)
    ]
    lifetimes = [
        ((r["destroyed_at"] or r["stopped_at"] or now) - r["created_at"]) / 60 for r in duds
    ]
    gpu_hours = 0.0
    for r in rows:
        if delivers(r) and r["running_at"] is not None:
            end = _held_end(r, now)
            gpu_hours += max(0.0, end - r["running_at"]) / 3600
    total = sum(r["total_usd"] for r in rows)
    to_fleet = time_to_delivering_fleet(rows, facts)
    # A job "done" on a machine that cannot compute (a stale driver that still runs a shell, a
    # misreported GPU) did no work: only jobs finished on delivering machines count.
    good = {int(r["id"]) for r in rows if "id" in r and delivers(r)}
    done_at = facts.done_on(good)
    to_done = (
        max(done_at) - facts.start
        if facts.jobs_total > 0 and len(done_at) >= facts.jobs_total
        else None
    )
    done: dict[str, float] = {}  # sized jobs' reference GPU-hours delivered in the run, once each
    for j in truth.get("jobs") or ():
        at = j.get("done_at")
        if at is None or at > facts.finish + EPS or j.get("started_at", 0) < facts.start - EPS:
            continue
        if int(j["instance_id"]) in good:
            done[str(j["job"])] = float(j["ref_hours"])
    work = sum(done.values())
    return {
        "dud_usd": round(sum(r["total_usd"] for r in duds), 6),
        "duds": len(duds),
        "dud_mean_lifetime_min": round(statistics.fmean(lifetimes), 3) if lifetimes else 0.0,
        "false_kills": len(false_kills),
        "time_to_fleet_min": round(to_fleet / 60, 3) if to_fleet is not None else None,
        "time_to_done_min": round(to_done / 60, 3) if to_done is not None else None,
        "jobs_finished": len(done_at),
        "total_usd": round(total, 6),
        "usd_per_gpu_hour": round(total / gpu_hours, 4) if gpu_hours > 0 else None,
        "work_done": round(work, 6),
        "usd_per_work_hour": round(total / work, 4) if work > 0 else None,
    }


def median(values: Iterable[float | None], null_is_worst: bool) -> float | None:
    """The median, counting null ("never") as worse than every number; null if it lands there."""
    vals = list(values)
    nums = [math.inf if v is None else float(v) for v in vals if v is not None or null_is_worst]
    if not nums:
        return None
    m = statistics.median(nums)
    return None if math.isinf(m) else round(m, 6)


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every figure's median over `runs`."""
    return {k: median((r.get(k) for r in runs), k in NULL_IS_WORST) for k in SCORE_KEYS}


def ratio(mine: float | None, base: float | None) -> float | None:
    """mine / base; null where undefined (either never, or the base is zero: against a floor,
    nothing was delivered)."""
    if mine is None or base is None or base <= 0 or not math.isfinite(base):
        return None
    return round(mine / base, 3)


def summarise(every_run: list[dict[str, Any]], policies: list[str]) -> dict[str, Any]:
    """Per policy, over its valid runs: medians of every figure, their ranges, ratios to `seed`'s,
    per market the same with the worst named; for warm runs, the earlier campaigns' under
    `warmup`; how many runs were set aside as invalid (a lagging run is never scored silently)."""
    runs = [r for r in every_run if r.get("valid", True)]
    summary: dict[str, Any] = {}
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        s = medians(mine)
        s["runs"] = len(mine)
        s["range"] = {
            k: [min(vals), max(vals)] if vals else None
            for k in SCORE_KEYS
            for vals in [[r[k] for r in mine if r.get(k) is not None]]
        }
        s["never"] = {k: sum(1 for r in mine if r.get(k) is None) for k in NULL_IS_WORST}
        earlier = [r["warmup"] for r in mine if "warmup" in r]
        if earlier:  # warm runs: the earlier (cold) campaigns' medians too
            s["warmup"] = medians(earlier)
        summary[policy] = s
    base = summary.get("seed")
    for policy in policies:
        s = summary[policy]
        for name, key in RATIO_KEYS.items():
            s[name] = ratio(s[key], base[key]) if base is not None else None
        if base is not None:
            s["per_market"] = per_market(runs, policy)
            s["worst_market"] = worst_market(s["per_market"])
        s["invalid"] = sum(
            1 for r in every_run if r["policy"] == policy and not r.get("valid", True)
        )
    return summary


def per_market(runs: list[dict[str, Any]], policy: str) -> list[dict[str, Any]]:
    """For each market: the policy's medians over its seeds against seed's, as ratios."""
    out = []
    for market in sorted({r["market"] for r in runs}):
        here = [r for r in runs if r["market"] == market]
        row: dict[str, Any] = {"market": market}
        for name, key in RATIO_KEYS.items():
            nw = key in NULL_IS_WORST
            mine = median((r.get(key) for r in here if r["policy"] == policy), nw)
            theirs = median((r.get(key) for r in here if r["policy"] == "seed"), nw)
            row[name] = ratio(mine, theirs)
            if mine is None and theirs is not None and nw:
                row.setdefault("never", []).append(key)  # seed got there: the worst case
            if theirs is None and mine is not None and nw:
                row.setdefault("seed_never", []).append(key)  # a win money cannot be set against
        row["false_kills"] = sum(r["false_kills"] for r in here if r["policy"] == policy)
        out.append(row)
    return out


def worst_market(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The market where the policy did worst against seed: a "never" where seed got there first,
    then the highest ratio of money or time. One only this policy finished is no loss."""

    def badness(row: dict[str, Any]) -> float:
        if row.get("never"):
            return math.inf
        if "time_to_done_min" in row.get("seed_never", ()):
            return -1.0
        vals = [
            row[k]
            for k in ("total_usd_vs_seed", "time_to_done_vs_seed", "time_to_fleet_vs_seed")
            if row.get(k) is not None
        ]
        return max(vals) if vals else -1.0

    if not rows:
        return None
    return max(rows, key=badness)
