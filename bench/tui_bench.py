"""Dashboard cost at 3, 1,000 and 10,000 instances: the real app, headless, fed a new snapshot every
second (every instance's util and billing change), a key press every second, in the pane view,
the table view, and with the detail screen open over the fleet (refreshing itself).
Reports CPU share of one core and key-to-render latency. Run: python -m bench.tui_bench

The snapshots are built before the clock starts: building them is the engine's work (in its own
thread, or in the controller's process), not the dashboard's."""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import time

from rentwatch.ledger import Ledger
from rentwatch.views.detail import InstanceDetail, LedgerLine, Sample, StatusLine
from rentwatch.views.snapshot import FleetReadout, InstanceSnap
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.messages import FleetSnapshot


class StillEngine:
    """Stands in for the engine thread: the benchmark feeds snapshots itself."""

    on_snapshot = None
    on_error = None

    def start(self) -> None:
        pass

    def shutdown(self, mode: str = "stop") -> None:
        pass

    def detail(self, instance_id: int, logs: bool = True) -> concurrent.futures.Future[object]:
        fut: concurrent.futures.Future[object] = concurrent.futures.Future()
        fut.set_result(detail(instance_id))
        return fut


def detail(instance_id: int) -> InstanceDetail:
    """A full detail: 120 samples, a status history, 60 ledger events, 40 log lines."""
    return InstanceDetail(
        instance_id=instance_id,
        now=1e9 + 600,
        time_scale=30.0,
        gpu_name="RTX 4090",
        machine_id=1000,
        host_id=50000,
        phase="verified",
        status="running",
        status_msg="success, running img/ssh",
        created_at=1e9,
        ended_at=None,
        gpu_dph=0.29,
        storage_dph=0.01,
        gpu_usd=0.04,
        storage_usd=0.002,
        bandwidth_usd=0.0,
        preflight={"ran": True, "ok": True, "tflops": 150.2, "expected": 165.0, "name": "x"},
        status_history=tuple(StatusLine(1e9 + k, "loading", f"layer {k}") for k in range(20)),
        samples=tuple(Sample(1e9 + 5 * k, float(k % 100), 1900.0, 2520.0, ()) for k in range(120)),
        jobs=(),
        market_logs=tuple(f"log line {k}" for k in range(40)),
        market_logs_error="",
        events=tuple(LedgerLine(k, 1e9 + k, "status", "engine", None, "x") for k in range(60)),
    )


def fleet(n: int, tick: int) -> FleetReadout:
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
    return FleetReadout(
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
        time_scale=30.0,
        budget_usd=n * 1.0,
        dph_now=0.3 * n,
    )


async def measure(n: int, view: str, seconds: int) -> tuple[float, float]:
    app = RentwatchApp(StillEngine(), Ledger(":memory:"), refresh_s=0.25)  # type: ignore[arg-type]
    lat = []
    # three fleets, cycled 1, 2, 1, 2...: every tick still changes every instance's figures,
    # and the process holds three snapshots as the app does, not one per second of the run
    snaps = [fleet(n, tick) for tick in range(3)]
    async with app.run_test(size=(150, 45)) as pilot:
        if view == "table":
            await pilot.press("t")
        app.post_message(FleetSnapshot(snaps[0]))
        await pilot.pause(0.5)
        if view == "detail":
            await pilot.press("enter")
            await pilot.pause(0.5)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for tick in range(1, seconds + 1):
            app.post_message(FleetSnapshot(snaps[1 + tick % 2]))
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
    ap.add_argument("--views", default="panes,table,detail")
    ap.add_argument("--sizes", default="3,1000,10000", help="the first is the baseline")
    args = ap.parse_args()
    base: dict[str, float] = {}
    print(
        f"{'view':6} {'instances':>9} {'CPU of one core':>16} {'key latency (median)':>22} {'vs 3':>8}"
    )
    sizes = [int(x) for x in args.sizes.split(",")]
    for view in args.views.split(","):
        for n in sizes:
            cpu, lat = asyncio.run(measure(n, view, args.seconds))
            if n == sizes[0]:
                base[view] = lat
            print(f"{view:6} {n:9d} {cpu:15.0%} {lat:19.1f} ms {lat - base[view]:+7.1f}")


if __name__ == "__main__":
    main()
