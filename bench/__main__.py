"""Run every benchmark: python -m bench  (figures go into docs/benchmarks.md by hand, with the date)."""

from __future__ import annotations

import platform
import subprocess
import sys
import time

print(
    f"# {time.strftime('%Y-%m-%d')} on {platform.node()} ({platform.machine()}, Python {platform.python_version()})"
)
for module in (
    "bench.ledger_bench",
    "bench.tui_bench",
    "bench.engine_bench",
    "bench.service_bench",
    "bench.service_hour",
):
    print(f"\n## python -m {module}", flush=True)
    subprocess.run([sys.executable, "-m", module], check=True)
