"""The interruptible tier's safety figures over refereed runs (issue 28), the simulator's truth
set against the ledger (`rentwatch referee ... --keep-logs DIR`):

- left running: a rental still running when the run ended (it bills on);
- paused unwatched: a bid rental the market paused after our last stop of it, never destroyed
  (it resumes by itself once its bid wins, and bills, with nobody watching);
- verified destroyed: a rental that passed its preflight and that automation destroyed
  (never allowed: DESIGN rule 3);
- jobs run twice to the end: a job with two clean exits in the ledger that both stand (an
  exit whose output was lost with its host is voided, and the job ran again).

    python -m bench.tier_safety DIR [DIR ...] [--policy default]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from rentwatch.ledger import Ledger


def run_safety(run_dir: Path) -> dict[str, int]:
    truth = json.loads((run_dir / "truth.json").read_text())
    with Ledger(run_dir / "ledger.duckdb", read_only=True) as led:
        stops = led.events(where="kind = 'stop' AND actor <> 'market'")
        proven = {e.instance_id for e in led.events(where="kind = 'preflight_passed'")}
        destroys = led.events(where="kind = 'destroy' AND actor LIKE 'rule:%'")
        # a clean exit whose output was lost with its host (voided) was run again: not twice
        exits = led.events(
            where="kind = 'job_finished' AND ok AND seq NOT IN (SELECT seq FROM voided_exits)"
        )
    our_stop: dict[int, float] = {}
    for e in stops:
        if e.instance_id is not None:
            our_stop[e.instance_id] = max(our_stop.get(e.instance_id, e.at), e.at)
    left = paused = 0
    for r in truth["instances"]:
        if r["destroyed_at"] is not None:
            continue
        if r["actual_status"] == "running":
            left += 1
        outbids = r.get("outbid_at") or []
        if r.get("bid") and outbids and max(outbids) > our_stop.get(r["id"], float("-inf")):
            paused += 1
    clean = Counter(str(e.detail.get("job")) for e in exits if e.detail.get("exit_code") == 0)
    return {
        "left_running": left,
        "paused_unwatched": paused,
        "verified_destroyed": len({e.instance_id for e in destroys if e.instance_id in proven}),
        "jobs_twice": sum(1 for n in clean.values() if n > 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--policy", default="default")
    args = ap.parse_args()
    total: Counter[str] = Counter()
    runs = 0
    for d in args.dirs:
        for run_dir in sorted(d.glob(f"m*-{args.policy}-s*")):
            got = run_safety(run_dir)
            total.update(got)
            runs += 1
            if any(got.values()):
                print(f"{d.name}/{run_dir.name}: {got}")
    print(
        f"{runs} runs: "
        + ", ".join(
            f"{k} {total[k]}"
            for k in ("left_running", "paused_unwatched", "verified_destroyed", "jobs_twice")
        )
    )


if __name__ == "__main__":
    main()
