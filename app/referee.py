"""The policy referee: the same market, the same seed, several policies, scored from the
simulator's truth (never from the engine's own ledger)."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from .core.campaign import Campaign
from .core.policy import get_policy
from .ledger import Ledger
from .session import Session
from .sim.scenario import DELIVERING, Scenario
from .sim.server import SimServer

SCORE_KEYS = (
    "dud_usd",
    "duds",
    "dud_mean_lifetime_min",
    "false_kills",
    "time_to_fleet_min",
    "jobs_finished",
    "total_usd",
    "usd_per_gpu_hour",
)


async def _one_run(
    sim: SimServer, campaign: Campaign, policy_name: str, ledger: Ledger, key: Path
) -> tuple[float, float, int]:
    """Run a campaign to its end; returns (market start, market finish, jobs done)."""
    session = Session.open(
        sim.url,
        sim.api_key,
        ledger,
        campaign,
        get_policy(policy_name).with_overrides(campaign.policy),
        key,
        log=lambda _: None,
    )
    sup = session.sup
    start = sim.market.clock.now()
    try:
        await session.start()
        await sup.run()
        finish = sim.market.clock.now()
        await session.release("rule:campaign_end", "referee: campaign ended")
    finally:
        await session.end("referee: run over")
    done = sum(1 for j in sup.jobs.jobs if j.status == "done")
    return start, finish, done


def score(truth: dict[str, Any], start: float, finish: float, jobs_done: int) -> dict[str, float]:
    """Score one run from the truth: instances created at or after `start`."""
    now = truth["now"]
    rows = [r for r in truth["instances"] if r["created_at"] >= start - 1e-6]
    duds = [r for r in rows if r["behaviour"] not in DELIVERING or r["running_at"] is None]
    false_kills = [
        r
        for r in rows
        if r["behaviour"] in DELIVERING
        and r["destroyed_at"] is not None
        and r["destroyed_at"] < finish - 1e-6
    ]
    lifetimes = [
        ((r["destroyed_at"] or r["stopped_at"] or now) - r["created_at"]) / 60 for r in duds
    ]
    gpu_hours = 0.0
    for r in rows:
        if r["behaviour"] in DELIVERING and r["running_at"] is not None:
            end = r["destroyed_at"] or r["stopped_at"] or now
            gpu_hours += max(0.0, end - r["running_at"]) / 3600
    total = sum(r["total_usd"] for r in rows)
    return {
        "dud_usd": round(sum(r["total_usd"] for r in duds), 6),
        "duds": len(duds),
        "dud_mean_lifetime_min": round(statistics.fmean(lifetimes), 3) if lifetimes else 0.0,
        "false_kills": len(false_kills),
        "time_to_fleet_min": round((finish - start) / 60, 3),
        "jobs_finished": jobs_done,
        "total_usd": round(total, 6),
        "usd_per_gpu_hour": round(total / gpu_hours, 4) if gpu_hours > 0 else 0.0,
    }


def referee(
    scenario: Scenario,
    campaign: Campaign,
    policies: list[str],
    seeds: int,
    warm: bool = False,
    time_scale: float | None = None,
) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "key"
        for k in range(seeds):
            sc = replace(
                scenario, seed=scenario.seed + k, time_scale=time_scale or scenario.time_scale
            )
            for policy in policies:
                sim = SimServer(sc, api_key="referee").start_in_thread()
                ledger = Ledger(Path(tmp) / f"{policy}-{k}.duckdb")
                try:
                    result = None
                    for _ in range(2 if warm else 1):
                        start, finish, done = asyncio.run(
                            _one_run(sim, campaign, policy, ledger, key)
                        )
                        result = score(sim.call(sim.market.truth), start, finish, done)
                    assert result is not None
                    runs.append({"policy": policy, "seed": sc.seed, "warm": warm, **result})
                finally:
                    ledger.close()
                    sim.stop_thread()
    summary: dict[str, Any] = {}
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        summary[policy] = {k: statistics.median(r[k] for r in mine) for k in SCORE_KEYS}
        summary[policy]["range"] = {
            k: [min(r[k] for r in mine), max(r[k] for r in mine)] for k in SCORE_KEYS
        }
    if "seed" in summary:
        base = summary["seed"]
        for policy in policies:
            s = summary[policy]
            s["dud_usd_vs_seed"] = (
                round(s["dud_usd"] / base["dud_usd"], 3) if base["dud_usd"] else None
            )
            s["time_to_fleet_vs_seed"] = (
                round(s["time_to_fleet_min"] / base["time_to_fleet_min"], 3)
                if base["time_to_fleet_min"]
                else None
            )
    return {"scenario": scenario.name, "runs": runs, "summary": summary}


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"referee: scenario {result['scenario']}, {len(result['runs'])} run(s); medians (range)"
    ]
    head = (
        f"{'policy':8} {'dud $':>16} {'duds':>9} {'dud life min':>16} {'false kills':>11} "
        f"{'to fleet min':>16} {'total $':>8} {'$/GPU-h':>8} {'dud $ vs seed':>13} {'fleet vs seed':>13}"
    )
    lines.append(head)
    for policy, s in result["summary"].items():
        rg = s["range"]

        def cell(k: str, fmt: str, s: dict[str, Any] = s, rg: dict[str, Any] = rg) -> str:
            return f"{s[k]:{fmt}} ({rg[k][0]:{fmt}}-{rg[k][1]:{fmt}})"

        vs = s.get("dud_usd_vs_seed")
        tf = s.get("time_to_fleet_vs_seed")
        lines.append(
            f"{policy:8} {cell('dud_usd', '.3f'):>16} {cell('duds', '.0f'):>9} "
            f"{cell('dud_mean_lifetime_min', '.1f'):>16} {s['false_kills']:>11.0f} "
            f"{cell('time_to_fleet_min', '.0f'):>16} {s['total_usd']:>8.3f} {s['usd_per_gpu_hour']:>8.3f} "
            f"{f'{vs:.2f}x' if vs is not None else '-':>13} {f'{tf:.2f}x' if tf is not None else '-':>13}"
        )
    return "\n".join(lines)
