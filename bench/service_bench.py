"""The dashboard over the controller's socket at 1,000 instances, against today's in-process
dashboard in the same run: the dashboard's CPU and key latency, how long an operator's intent
takes to come back as a snapshot, and the controller's extra CPU per attached dashboard.

The controller here serves synthetic snapshots (the same 1,000-instance fleet as tui_bench, a
new one every second) through the real server, socket, stream and client; the engine behind it
is not the subject. Run: python -m bench.service_bench [--seconds N]"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rentwatch.engine.intents import StopIntent
from rentwatch.run.service import api
from rentwatch.run.service.controller import Controller
from rentwatch.run.service.remote import ControllerClient, RemoteEngine
from rentwatch.run.service.server import ServiceServer
from rentwatch.run.service.target import Target

from bench.tui_bench import fleet, measure


class BenchController(Controller):
    """Serves `fleet(n, tick)`, a new tick each second; a stop intent ends that instance."""

    def __init__(self, n: int, path: Path) -> None:
        super().__init__("bench", path)
        self.n = n
        self.tick = 0
        self.stopped: set[int] = set()
        self._cache: tuple[tuple[int, int], dict[str, Any]] | None = None

    def snapshot(self) -> dict[str, Any]:
        key = (self.tick, len(self.stopped))
        if self._cache is None or self._cache[0] != key:
            snap = fleet(self.n, self.tick)
            now = time.time()  # wall clock, so the client can time the delivery
            rows = tuple(
                dataclasses.replace(i, ended_at=now, phase="stopped")
                if i.instance_id in self.stopped
                else i
                for i in snap.instances
            )
            snap = dataclasses.replace(snap, now=now, instances=rows)
            self._cache = (key, api.snap_to_json(snap))
        return self._cache[1]

    def status(self) -> dict[str, Any]:
        return {"campaign": self.campaign, "ledger": str(self.ledger_path), "pid": os.getpid()}

    async def apply(self, intent: api.Intent) -> str:
        self.stopped.add(getattr(intent, "instance_id", 0))
        self.touch()
        return "stopped"


def _serve(n: int, sock: str, ready: Any, done: Any) -> None:
    async def main() -> None:
        ctrl = BenchController(n, Path(sock).with_suffix(".duckdb"))
        server = ServiceServer(ctrl)
        await server.start(Path(sock))
        ready.set()
        while not done.is_set():
            await asyncio.sleep(1.0)
            ctrl.tick += 1
            ctrl.touch()
        await server.stop()

    asyncio.run(main())


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def controller_cpu(pid: int, target: Target, seconds: float) -> list[tuple[int, float]]:
    out = []
    for k in (0, 1, 2, 4):
        engines = [RemoteEngine(target) for _ in range(k)]
        for e in engines:
            e.start()
        time.sleep(1.0)
        c0, t0 = _cpu_s(pid), time.monotonic()
        time.sleep(seconds)
        out.append((k, (_cpu_s(pid) - c0) / (time.monotonic() - t0)))
        for e in engines:
            e.shutdown("detach")
    return out


def intent_latency(target: Target, rounds: int) -> list[float]:
    """Intent sent -> the snapshot showing it decoded on the dashboard's side, in ms."""
    engine = RemoteEngine(target)
    got = threading.Event()
    want: list[int] = []

    def on_snap(snap: Any) -> None:
        if want and any(i.instance_id == want[0] and i.ended_at for i in snap.instances):
            got.set()

    engine.on_snapshot = on_snap
    engine.start()
    time.sleep(1.0)
    lat = []
    for r in range(rounds):
        want[:] = [40000 + r]
        got.clear()
        t0 = time.perf_counter()
        engine.submit(StopIntent(40000 + r)).result(10)
        got.wait(10)
        lat.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.3)
    engine.shutdown("detach")
    return lat


async def remote_dashboard(target: Target, seconds: int) -> tuple[float, float]:
    """The real app attached over the socket: CPU share of this process and key latency, the
    same loop as tui_bench.measure."""
    from rentwatch.widgets.app import RentwatchApp

    app = RentwatchApp(
        RemoteEngine(target), ControllerClient(target, timeout=600.0), refresh_s=0.25
    )
    lat = []
    async with app.run_test(size=(150, 45)) as pilot:
        while app.latest is None:
            await pilot.pause(0.1)
        await pilot.pause(0.5)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for tick in range(1, seconds + 1):
            t0 = time.perf_counter()
            await pilot.press("down" if tick % 2 else "up")
            await pilot.pause()
            lat.append((time.perf_counter() - t0) * 1000)
            rest = 1.0 - (time.perf_counter() - t0)
            if rest > 0:
                await asyncio.sleep(rest)
        cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
        app.engine.shutdown("detach")
    return cpu, statistics.median(lat)


def per_snapshot_cost(n: int) -> tuple[float, float]:
    """CPU ms per snapshot, best of 7: the controller's (to JSON, to an event) and the
    dashboard's (parse, rebuild the dataclasses). Best-of is what an idle machine would see."""
    import json

    snap = fleet(n, 1)
    server, client = [], []
    for _ in range(7):
        t0 = time.process_time()
        wire = api.sse_event("snapshot", api.snap_to_json(snap))
        t1 = time.process_time()
        api.snap_from_json(json.loads(wire.split(b"data: ", 1)[1]))
        t2 = time.process_time()
        server.append((t1 - t0) * 1000)
        client.append((t2 - t1) * 1000)
    return min(server), min(client)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--instances", type=int, default=1000)
    args = ap.parse_args()
    n = args.instances
    with tempfile.TemporaryDirectory(prefix="rwb") as tmp:
        sock = str(Path(tmp) / "c.sock")
        ctx = multiprocessing.get_context("spawn")
        ready, done = ctx.Event(), ctx.Event()
        proc = ctx.Process(target=_serve, args=(n, sock, ready, done))
        proc.start()
        try:
            ready.wait(30)
            target = Target(socket=sock)
            size = len(api.sse_event("snapshot", BenchController(n, Path(sock)).snapshot()))
            print(f"snapshot of {n} instances on the wire: {size / 1024:.0f} KiB")

            cpu_in, lat_in = asyncio.run(measure(n, "panes", args.seconds))
            cpu_re, lat_re = asyncio.run(remote_dashboard(target, args.seconds))
            print(f"{'dashboard':12} {'CPU of one core':>16} {'key latency (median)':>22}")
            print(f"{'in-process':12} {cpu_in:15.0%} {lat_in:19.1f} ms")
            print(f"{'attached':12} {cpu_re:15.0%} {lat_re:19.1f} ms ({lat_re - lat_in:+.1f} ms)")

            lat = intent_latency(target, max(5, args.seconds))
            print(
                f"intent -> snapshot back on the dashboard: median {statistics.median(lat):.1f} ms, "
                f"max {max(lat):.1f} ms (the extra an attached dashboard adds to key-to-screen)"
            )
            s_ms, c_ms = per_snapshot_cost(n)
            print(f"CPU per snapshot: controller {s_ms:.1f} ms, dashboard {c_ms:.1f} ms")
            rows = controller_cpu(proc.pid or 0, target, args.seconds / 2)
            base = rows[0][1]
            print(f"{'dashboards':>10} {'controller CPU':>15} {'extra per dashboard':>20}")
            for k, cpu in rows:
                extra = f"{(cpu - base) / k:+.1%}" if k else ""
                print(f"{k:10d} {cpu:14.1%} {extra:>20}")
        finally:
            done.set()
            proc.join(10)
            if proc.is_alive():
                proc.kill()


if __name__ == "__main__":
    main()
