"""Does the plan bracket what the campaign then costs? For each market of a fresh family, the
plan (`rentwatch offers --plan`: the engine's own choice, priced by `core/plan.py`) is made on
the market as it opens, with an empty ledger; then the referee runs the campaign on that market
(its own simulator, same scenario and seed, paced as every referee run is) and the market's
truth says what it cost.

    python -m bench.plan_bracket --family-seed 8317 --family 6 \
        [--campaign bench/bid_campaign.toml] [--policy default] [--json] [--runs FILE]

With `--runs FILE` the runs are read from `rentwatch referee --json --campaign ... --policies
default --family N --family-seed S` instead (the same markets, scenarios and seeds), and only
the plans are made here. It prints one line per market (the plan's p10-p90, the run's cost, inside or not, the floor)
and the count inside the range. Runs go one after another in this process (CPU is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from rentwatch.cli.plan import PLAN_SEED
from rentwatch.core.plan import plan
from rentwatch.core.plan_inputs import plan_inputs
from rentwatch.engine.preview import preview
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign
from rentwatch.market.vast.client import VastClient
from rentwatch.referee.run import Task, policy_from_spec, run_task
from rentwatch.referee.run import plan as referee_tasks
from rentwatch.sim.server import SimServer


async def _plan_on(url: str, key: str, task: Task) -> dict[str, Any] | None:
    policy = policy_from_spec(task.policy).with_overrides(task.campaign.policy)
    ledger = Ledger(":memory:")
    try:
        async with VastClient(url, key) as client:
            await client.sync_clock()
            view = await preview(client, ledger, task.campaign, policy)
    finally:
        ledger.close()
    made = plan_inputs(
        view.snapshot, view.picks, task.campaign, policy, view.gpu_billing, view.jobs_left
    )
    if made is None:
        return None
    result = plan(made[0], random.Random(PLAN_SEED))
    return None if result is None else result.json()


def one(task: Task, plan_only: bool = False, ran: dict[str, Any] | None = None) -> dict[str, Any]:
    """The plan on market `task.market`, and the campaign's run there (`ran`: one the referee
    already made, from its `--json`)."""
    # the market as it opens: the same scenario and seed, its clock nearly standing still
    sim = SimServer(replace(task.scenario, time_scale=1.0), api_key="plan").start_in_thread()
    try:
        planned = asyncio.run(_plan_on(sim.url, sim.api_key, task))
    finally:
        sim.stop_thread()
    if plan_only:
        return {"market": task.market, "plan": planned}
    run = ran if ran is not None else run_task(task)
    cost = run["total_usd"]
    lo = hi = None
    if planned is not None:
        lo, hi = planned["cost_usd"]["p10"], planned["cost_usd"]["p90"]
    return {
        "market": task.market,
        "plan": planned,
        "total_usd": cost,
        "floor_usd": run.get("floor_usd"),
        "time_to_done_min": run.get("time_to_done_min"),
        "valid": run.get("valid", True),
        "inside": lo is not None and hi is not None and lo <= cost <= hi,
        "side": None
        if lo is None or hi is None
        else ("low" if cost < lo else "high" if cost > hi else "in"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family-seed", type=int, required=True)
    ap.add_argument("--family", type=int, default=6, help="markets (default 6)")
    ap.add_argument("--campaign", default=str(Path(__file__).with_name("bid_campaign.toml")))
    ap.add_argument("--policy", default="default")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plan-only", action="store_true", help="the plans alone, no campaign run")
    ap.add_argument(
        "--runs",
        help="the runs of `rentwatch referee --json` with the same campaign, policy and family"
        " (instead of running them here)",
    )
    args = ap.parse_args()
    campaign = load_campaign(Path(args.campaign).read_text())
    tasks = referee_tasks(
        None, campaign, [args.policy], 1, family=args.family, family_seed=args.family_seed
    )
    ran: dict[int, dict[str, Any]] = {}
    if args.runs:
        ran = {r["market"]: r for r in json.loads(Path(args.runs).read_text())["runs"]}
    rows = []
    for task in tasks:
        r = one(task, args.plan_only, ran.get(task.market) if args.runs else None)
        rows.append(r)
        if args.plan_only:
            print(json.dumps(r), flush=True)
            continue
        p = r["plan"] or {}
        c = p.get("cost_usd", {})
        print(  # each market as it ends (on stderr under --json)
            f"market {r['market']}: plan ${c.get('p10')} - ${c.get('p90')} "
            f"(median ${c.get('median')}), ran ${r['total_usd']:.4f} ({r['side']}), "
            f"floor listed ${p.get('floor_usd')} / truth ${r['floor_usd']}, "
            f"done in {r['time_to_done_min']} min (plan {p.get('hours')} h)"
            + ("" if r["valid"] else " [run invalid: lag]"),
            flush=True,
            file=sys.stderr if args.json else sys.stdout,
        )
    inside = sum(1 for r in rows if r.get("inside"))
    if args.json:
        print(json.dumps({"family_seed": args.family_seed, "runs": rows, "inside": inside}))
    else:
        print(f"inside the plan's p10-p90: {inside} of {len(rows)} markets")


if __name__ == "__main__":
    main()
