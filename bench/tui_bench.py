"""Dashboard cost at 3, 300 and 1,000 instances: the real app, headless, fed a new snapshot every
second (every instance's util and billing change), a key press every second.
Reports CPU share of one core and key-to-render latency. Run: python -m bench.tui_bench"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import replace

from rentwatch.ledger import Ledger
from rentwatch.snapshot import FleetSnap, InstanceSnap
from rentwatch.widgets.app import RentwatchApp


class StillEngine:
    """Stands in for the engine thread: the benchmark feeds snapshots itself."""

    on_snapshot = None
    on_error = None

    def start(self) -> None:
        pass

    def shutdown(self, mode: str = "stop") -> None:
        pass


def fleet(n: int, tick: int) -> FleetSnap:
    rows = tuple(
        InstanceSnap(
            instance_id=40000 + i,
            gpu_name="RTX 4090",
            machine_id=1000 + i,
            host_id=50000 + i % 97,
            dph=0.3,
            phase="working" if i % 5 else "booting",
            status="running" if i % 5 else "loading",
            status_msg="success, running img/ssh" if i % 5 else f"abc: Downloading {tick}MB/900MB",
            status_age_s=tick * 30.0 % 400,
            freeze_window_s=360.0,
            util=float((i * 7 + tick * 13) % 100),
            util_history=tuple(float((i + k + tick) % 100) for k in range(16)),
            sm_clock=1900.0,
            max_sm_clock=2520.0,
            throttle="",
            billed_usd=0.001 * (i + tick),
            verdict="150.2 TFLOP/s",
            created_at=1e9,
            ended_at=None,
            failure_class=None,
            passed_preflight=bool(i % 5),
        )
        for i in range(n)
    )
    return FleetSnap(
        now=1e9 + tick * 60,
        campaign="bench",
        policy="default",
        fleet=n,
        creates=n,
        max_creates=n * 2,
        instances=rows,
        quarantined=0,
        duds=0,
        dud_usd=0.0,
        spent_usd=1.0,
        verified=n,
        gpu_hours=1.0,
        decisions=(f"tick {tick}",),
        decisions_total=tick,
        finished=None,
    )


async def measure(n: int, view: str, seconds: int) -> tuple[float, float]:
    app = RentwatchApp(StillEngine(), Ledger(":memory:"), refresh_s=0.25)  # type: ignore[arg-type]
    lat = []
    async with app.run_test(size=(150, 45)) as pilot:
        if view == "table":
            await pilot.press("t")
        app.latest = fleet(n, 0)
        await pilot.pause(0.5)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for tick in range(1, seconds + 1):
            app.latest = replace(fleet(n, tick))
            t0 = time.perf_counter()
            await pilot.press("down" if tick % 2 else "up")
            await pilot.pause()  # until the press is handled and the screen refreshed
            lat.append((time.perf_counter() - t0) * 1000)
            rest = 1.0 - (time.perf_counter() - t0)
            if rest > 0:
                await asyncio.sleep(rest)
        cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    return cpu, statistics.median(lat)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    args = ap.parse_args()
    base: dict[str, float] = {}
    print(
        f"{'view':6} {'instances':>9} {'CPU of one core':>16} {'key latency (median)':>22} {'vs 3':>8}"
    )
    for view in ("panes", "table"):
        for n in (3, 300, 1000):
            cpu, lat = asyncio.run(measure(n, view, args.seconds))
            if n == 3:
                base[view] = lat
            print(f"{view:6} {n:9d} {cpu:15.0%} {lat:19.1f} ms {lat - base[view]:+7.1f}")


if __name__ == "__main__":
    main()
