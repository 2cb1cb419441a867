"""The engine at scale: one poll cycle (the paged list call, the rules, the ledger writes) and the
controller's memory with 10, 100 and 1,000 live instances. The simulator runs in its own process
so its memory is not counted. Run: python -m bench.engine_bench"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rentwatch.client import VastClient
from rentwatch.core.policy import get_policy
from rentwatch.dashboard import watch_campaign
from rentwatch.ledger import Ledger
from rentwatch.ssh_runner import SSHRunner, load_or_create_key
from rentwatch.supervisor import Supervisor


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def measure(n: int, tmp: Path) -> tuple[float, float, float]:
    scen = tmp / f"s{n}.toml"
    scen.write_text(
        f'seed = 1\ntime_scale = 1\noffers = {n}\n[[host_class]]\nbehaviour = "healthy"\nshare = 1\n'
    )
    sim = subprocess.Popen(
        [sys.executable, "-m", "rentwatch", "sim", "--scenario", str(scen), "--api-key", "b"],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = sim.stdout.readline().strip()
    try:
        async with VastClient(url, "b", min_intervals={}) as c:
            offers = await c.search_offers({}, limit=n)
            await asyncio.gather(
                *(c.create_instance(o.id, image="img", disk_gb=10) for o in offers)
            )
        ledger = Ledger(tmp / f"l{n}.duckdb")
        client = VastClient(url, "b", min_intervals={})
        sup = Supervisor(
            client,
            ledger,
            watch_campaign(),
            get_policy("default"),
            SSHRunner(load_or_create_key(tmp / "key")),
            log=lambda _: None,
            adopt_all=True,
        )
        await client.sync_clock()
        await sup.prepare()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            await sup.poll_once()
            times.append(time.perf_counter() - t0)
        await client.aclose()
        ledger.close()
        return statistics.median(times), max(times), rss_mb()
    finally:
        sim.terminate()
        sim.wait()


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        print(f"{'instances':>9} {'poll cycle (median)':>20} {'(max)':>8} {'controller RSS':>15}")
        for n in (10, 100, 1000):
            med, worst, rss = asyncio.run(measure(n, Path(d)))
            print(f"{n:9d} {med * 1000:17.0f} ms {worst * 1000:6.0f} ms {rss:12.0f} MB")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
