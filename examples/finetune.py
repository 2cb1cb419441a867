"""A stand-in fine-tune for examples/first-campaign.toml: the campaign's `upload` pushes this
file into each job's workdir on a proven host, and each job runs it with its own rank.

It does what a real training script should do under rentwatch: writes its progress as a
fraction to the file named by $RENTWATCH_PROGRESS (the pane shows a bar and an ETA from it),
and leaves its results under out/, the job's `artifacts`. Replace the loop with your training.
"""

import argparse
import json
import os
import time
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--rank", type=int, required=True)
ap.add_argument("--steps", type=int, default=5)
args = ap.parse_args()

progress = os.environ.get("RENTWATCH_PROGRESS")
for step in range(1, args.steps + 1):
    time.sleep(0.2)  # one training step
    if progress:
        Path(progress).write_text(f"{step / args.steps:.3f}\n")
Path("out").mkdir(exist_ok=True)
Path("out/result.json").write_text(json.dumps({"rank": args.rank, "steps": args.steps}))
print(f"rank {args.rank}: {args.steps} steps done")
