"""Work lost per interruption on the interruptible tier, from the ledgers a referee run kept
(`--keep-logs DIR`): each `outbid` event's `work_lost_s` (the market time since the job's last
checkpoint that came off the box, `core/bidding.work_lost_s`), none where a copy off the
paused rental later landed that work on the job's next host (a `rescued` event, landed, naming
the outbid rental and the job), per run and over all runs.

    python -m bench.work_lost DIR [DIR ...] [--policy default] [--interval-min 10]

Issue 28's target: the median at most one checkpoint interval."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rentwatch.ledger import Ledger


def lost_minutes(run_dir: Path) -> tuple[list[float], int]:
    """Minutes of work each outbid with a job on it cost, in one run's ledger, and how many of
    those losses a landed copy took back."""
    with Ledger(run_dir / "ledger.duckdb", read_only=True) as led:
        outbids = led.events(where="kind = 'outbid'")
        landed = led.events(where="kind = 'rescued' AND ok AND detail->>'stage' = 'landed'")
    lost = {
        e.seq: float(e.detail["work_lost_s"]) / 60
        for e in outbids
        if isinstance(e.detail.get("work_lost_s"), int | float)
    }
    kept = 0
    for r in landed:  # the last outbid of that job on that rental before the copy
        mine = [
            e
            for e in outbids
            if e.seq in lost
            and e.instance_id == r.detail.get("source")
            and e.detail.get("job") == r.detail.get("job")
            and e.seq < r.seq
        ]
        if mine:
            lost[mine[-1].seq] = 0.0
            kept += 1
    return list(lost.values()), kept


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.work_lost")
    ap.add_argument("dirs", nargs="+", type=Path, help="--keep-logs folders")
    ap.add_argument("--policy", default="default", help="whose runs (the folder names say)")
    ap.add_argument("--interval-min", type=float, default=10.0, help="the checkpoint interval")
    args = ap.parse_args()
    every: list[float] = []
    medians: list[float] = []
    rescued = 0
    for d in args.dirs:
        for run in sorted(p for p in d.iterdir() if p.name.split("-")[1:2] == [args.policy]):
            lost, kept = lost_minutes(run)
            every += lost
            rescued += kept
            if lost:
                medians.append(statistics.median(lost))
            shown = f"median {statistics.median(lost):.1f} min" if lost else "no outbid on a job"
            print(f"{d.name}/{run.name}: {len(lost)} outbids with a job ({kept} copied), {shown}")
    if every:
        print(
            f"all: {len(every)} outbids with a job ({rescued} taken back by a copy), "
            f"median {statistics.median(every):.1f} min, "
            f"median of the runs' medians {statistics.median(medians):.1f} min, "
            f"within one interval ({args.interval_min:.0f} min): "
            f"{sum(1 for x in every if x <= args.interval_min)} of {len(every)}"
        )


if __name__ == "__main__":
    main()
