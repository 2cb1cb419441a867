"""The baseline the next policy work is judged on: `seed`, `default` cold and `default` warm on
fresh families, each run against its honest floor, with time and where the money went.

    python -m bench.baseline --family-seed 9001 --family-seed 9002 [--family 6]
        [--campaign bench/bid_campaign.toml] [--workers 1] [--out DIR] [--policy SPEC]

For each family seed it runs `rentwatch referee ... --policies seed,default` (cold) and
`rentwatch referee ... --policies default --warm` (an earlier campaign on the same market and
ledger first; `--policy SPEC`: another `default`, settings included, in both), keeping every run's evidence and the referee's JSON under `DIR/<seed>/{cold,warm}`. It prints, per
policy, the medians over every market of every family: the bill against the floor and against
seed, the time to done, the lag, and the bill split into work at the floor's price, work above
it, duds, boot, idle, storage and re-runs (the USD of job attempts that were requeued). Runs
marked invalid by the referee (lag over its bound) are counted and left out of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .referee_costs import decompose

SPLIT = ("floor_work", "above_floor", "duds", "boot", "idle", "storage", "rerun")


def _referee(args: argparse.Namespace, seed: int, warm: bool, out: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "rentwatch",
        "referee",
        "--family",
        str(args.family),
        "--family-seed",
        str(seed),
        "--campaign",
        str(args.campaign),
        "--policies",
        args.policy if warm else f"seed,{args.policy}",
        "--deadline-min",
        str(args.deadline_min),
        "--workers",
        str(args.workers),
        "--json",
        "--keep-logs",
        str(out),
    ]
    if warm:
        cmd.append("--warm")
    print("$", " ".join(cmd[2:]), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    (out / "referee.json").write_text(done.stdout)  # every run's figures, floor and lag
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _split(run: dict[str, Any], run_dir: Path) -> dict[str, float]:
    """One run's bill in SPLIT's parts (USD), from its kept evidence and its floor."""
    parts = decompose(run_dir)
    floor_work = float((run.get("floor") or {}).get("work_usd", 0.0))
    work = parts["work"]
    return {
        "floor_work": min(work, floor_work),
        "above_floor": max(0.0, work - floor_work),
        "duds": parts["duds"],
        "boot": parts["before_job"],
        "idle": parts["between_jobs"] + parts["after_jobs"] + parts["spares"],
        "storage": parts["storage_held"] + parts["storage_stopped"] + parts["bandwidth"],
        "rerun": parts["rerun"],
    }


def _med(values: list[float | None]) -> float | None:
    nums = [v for v in values if v is not None]
    return statistics.median(nums) if nums else None


def _f(v: float | None, nd: int = 3) -> str:
    return "-" if v is None else f"{v:.{nd}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--family-seed", type=int, action="append", required=True)
    ap.add_argument("--family", type=int, default=6, help="markets per family")
    ap.add_argument("--campaign", type=Path, default=Path("bench/bid_campaign.toml"))
    ap.add_argument("--deadline-min", type=int, default=900)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="keep the runs here")
    ap.add_argument(
        "--policy",
        default="default",
        help="the policy in the default rows, settings included (default+odds_prior_runs=4.0)",
    )
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="rw-baseline-"))
    load = os.getloadavg()[0]
    began = time.monotonic()
    rows: dict[str, list[dict[str, Any]]] = {"seed": [], "default cold": [], "default warm": []}
    invalid: dict[str, int] = dict.fromkeys(rows, 0)
    for seed in args.family_seed:
        for warm in (False, True):
            where = out / str(seed) / ("warm" if warm else "cold")
            result = _referee(args, seed, warm, where)
            for run in result["runs"]:
                name = "default warm" if warm else run["policy"].split("+")[0]
                if name == "default":
                    name = "default cold"
                if run.get("valid") is False:
                    invalid[name] += 1
                    continue
                policy = re.sub(r"[^A-Za-z0-9._-]+", "_", run["policy"])  # as run_name keeps it
                run_dir = where / f"m{run['market']:02d}-{policy}-s{run['seed']}"
                split = _split(run, run_dir) if run_dir.is_dir() else {}
                rows[name].append({**run, "family_seed": seed, "split": split})
    seed_usd = {(r["family_seed"], r["market"]): r["total_usd"] for r in rows["seed"]}
    print(
        f"# {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} cores), load "
        f"{load:.1f} at the start, {(time.monotonic() - began) / 60:.0f} wall min; family "
        f"{args.family} x seeds {args.family_seed}, campaign {args.campaign}, policy "
        f"{args.policy}; runs kept in {out}"
    )
    head = ["policy", "runs", "invalid", "vs floor", "vs seed", "USD", "floor USD", "done min"]
    head += ["lag med s", "lag max s", *SPLIT]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, runs in rows.items():
        vs_seed = [
            r["total_usd"] / seed_usd[k]
            for r in runs
            if (k := (r["family_seed"], r["market"])) in seed_usd and seed_usd[k]
        ]
        cells = [
            name,
            str(len(runs)),
            str(invalid[name]),
            _f(_med([r.get("vs_floor") for r in runs]), 2) + "x",
            _f(_med(list(vs_seed)), 2) + "x",
            _f(_med([r["total_usd"] for r in runs])),
            _f(_med([r.get("floor_usd") for r in runs])),
            _f(_med([r.get("time_to_done_min") or args.deadline_min for r in runs]), 0),
            _f(_med([(r.get("lag_s") or {}).get("median") for r in runs]), 0),
            _f(max([(r.get("lag_s") or {}).get("max") or 0.0 for r in runs], default=None), 0),
        ]
        cells += [_f(_med([r["split"].get(k) for r in runs if r["split"]])) for k in SPLIT]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
