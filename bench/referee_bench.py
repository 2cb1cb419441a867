"""The referee on a family of fresh markets: wall time, and `default` against `seed` on the
issue's targets (median total USD <= 0.7x, median time to finish <= 0.6x, median dud USD <= 0.5x,
no false kill, no market worse than seed by more than 10% in money or time).

    python -m bench.referee_bench [--family 20] [--family-seed 2026] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rentwatch.referee.campaigns import referee_campaign
from rentwatch.referee.run import referee
from rentwatch.referee.score import median, summarise
from rentwatch.referee.table import format_table
from rentwatch.sim.family import REPORT_FAMILY_SEEDS

TARGETS = {"total_usd_vs_seed": 0.7, "time_to_done_vs_seed": 0.6, "dud_usd_vs_seed": 0.5}


VALUES_OF_TIME = (0.0, 1.0, 5.0, 20.0)  # $ an operator would pay to wait one hour less


def cost_of_work(run: Mapping[str, Any], usd_per_hour: float) -> float | None:
    """What the work cost an operator who values an hour of waiting at `usd_per_hour`: the bill
    plus the wait to done; null when the work never finished."""
    done = run.get("time_to_done_min")
    if done is None:
        return None
    return float(run["total_usd"]) + usd_per_hour * float(done) / 60


def pareto_rows(
    runs: list[dict[str, Any]], policies: list[str], values: Iterable[float] = (0.0, 1.0, 5.0, 20.0)
) -> list[dict[str, Any]]:
    """Per policy: median dud USD, median time to done, and the median cost of the work at each
    value of time (never counts as worst), for docs/benchmarks.md's Pareto table."""
    vals = list(values)
    out = []
    for policy in policies:
        mine = [r for r in runs if r["policy"] == policy]
        row: dict[str, Any] = {
            "policy": policy,
            "dud_usd": median((r["dud_usd"] for r in mine), False),
            "time_to_done_min": median((r["time_to_done_min"] for r in mine), True),
            "never": sum(1 for r in mine if r["time_to_done_min"] is None),
        }
        for v in vals:
            row[f"cost_at_{v:g}_usd_per_h"] = median((cost_of_work(r, v) for r in mine), True)
        out.append(row)
    return out


def _cell(v: Any) -> str:
    return "never" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def verdicts(result: dict[str, Any], policy: str = "default") -> list[str]:
    """One line per target: the figure, and whether it holds."""
    s = result["summary"][policy]
    out = []
    for key, bound in TARGETS.items():
        v = s.get(key)
        ok = v is not None and v <= bound
        out.append(f"median {key}: {v if v is not None else 'never'} (target <= {bound}) {ok}")
    kills = [r["false_kills"] for r in result["runs"] if r["policy"] == policy]
    out.append(f"false kills per market: max {max(kills, default=0)} (target 0)")
    worse = [
        m["market"]
        for m in s.get("per_market", [])
        if m.get("never")
        or "time_to_done_min" not in m.get("seed_never", ())
        and any(
            m.get(k) is not None and m[k] > 1.1
            for k in ("total_usd_vs_seed", "time_to_done_vs_seed")
        )
    ]
    out.append(f"markets worse than seed by >10% in money or time (or never): {worse}")
    alone = [
        m["market"]
        for m in s.get("per_market", [])
        if "time_to_done_min" in m.get("seed_never", ())
    ]
    out.append(f"markets where seed never finished the work and {policy} did: {alone}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", type=int, default=20)
    ap.add_argument("--family-seed", type=int, default=REPORT_FAMILY_SEEDS[0])
    ap.add_argument("--policies", default="naive,seed,default")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", help="also write the referee's JSON here")
    ap.add_argument("--from-json", help="summarise an earlier --json instead of running")
    args = ap.parse_args()
    campaign = referee_campaign()
    policies = args.policies.split(",")
    t0 = time.monotonic()
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
        policies = list(result["summary"])
        result["summary"] = summarise(result["runs"], policies)  # with this code's summary
    else:
        result = referee(
            None,
            campaign,
            policies,
            1,
            family=args.family,
            family_seed=args.family_seed,
            workers=args.workers,
        )
    wall = time.monotonic() - t0
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(format_table(result))
    print(f"\n{len(result['runs'])} runs in {wall:.0f} s wall with {args.workers} workers")
    print(
        "\n| policy | dud $ | to done (min) | never done | "
        + " | ".join(f"cost at ${v:g}/h" for v in VALUES_OF_TIME)
        + " |"
    )
    print("|---" * (4 + len(VALUES_OF_TIME)) + "|")
    for row in pareto_rows(result["runs"], policies, VALUES_OF_TIME):
        cells = [row["dud_usd"], row["time_to_done_min"], row["never"]]
        cells += [row[f"cost_at_{v:g}_usd_per_h"] for v in VALUES_OF_TIME]
        print(f"| {row['policy']} | " + " | ".join(_cell(c) for c in cells) + " |")
    if "seed" in policies and "default" in policies:
        print("\n".join(verdicts(result)))


if __name__ == "__main__":
    main()
