"""The issue's "done when" for the controller as a service, at full length: a campaign started
headless runs for an hour of market time while dashboards attach and detach (ten times),
ledger queries run against it through `rentwatch ledger` and `rentwatch receipt`, and two
dashboards watch at once the whole time; then it is stopped, and its ledger and receipt are
compared with the simulated market's own truth (what the market bills, per instance).

Run: python -m bench.service_hour [--time-scale 60] [--market-min 60] [--cli-in-process]
(an hour of market time at 60x is a wall minute, plus the start and the stop; exit
status 1 if anything disagrees)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rentwatch.cli.main import main as cli_main
from rentwatch.ledger import Ledger
from rentwatch.run.service.remote import ControllerClient, RemoteEngine
from rentwatch.run.service.target import Target
from rentwatch.sim.scenario import parse_scenario
from rentwatch.sim.server import SimServer

CAMPAIGN = """
name = "hour"
image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
image_cuda = "12.4"
disk_gb = 40
offer_query = "num_gpus=1 rentable=true"
max_dph = 0.60
fleet = 2
max_creates = 60
budget_usd = 1000.0

[[jobs]]
name = "short"
run = "sleep {short}"

[[jobs]]
name = "long-a"
run = "{forever}"
timeout_min = 144000

[[jobs]]
name = "long-b"
run = "{forever}"
timeout_min = 144000
"""


def _cli(*args: str, in_process: bool = False) -> tuple[float, subprocess.CompletedProcess[str]]:
    """`rentwatch ARGS` as a process of its own, or `in_process`: its `main` called here, so
    no Python starts and imports rentwatch for it (what a query answers, not how long a
    process takes to start: the test's way, on a box whose CPU is short)."""
    t0 = time.monotonic()
    if not in_process:
        out = subprocess.run(
            [sys.executable, "-m", "rentwatch", *args], capture_output=True, text=True, timeout=300
        )
        return time.monotonic() - t0, out
    said, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    done = subprocess.CompletedProcess(args, code, said.getvalue(), err.getvalue())
    return time.monotonic() - t0, done


def _truth(sim: SimServer, t: float) -> dict[int, float]:
    def compute() -> dict[int, float]:
        mode = sim.market.scenario.gpu_billing
        return {iid: i.charges(t, mode).total_usd for iid, i in sim.market.instances.items()}

    return dict(sim.call(compute))


def _live(sim: SimServer) -> set[int]:
    t = sim.call(sim.market.truth)
    return {
        r["id"]
        for r in t["instances"]
        if r["destroyed_at"] is None and r["actual_status"] != "stopped"
    }


class Watcher:
    """One attached dashboard's client: counts what arrives, keeps the last snapshot."""

    def __init__(self, target: Target) -> None:
        self.engine = RemoteEngine(target)
        self.snaps = 0
        self.last: Any = None
        self.first_at: float | None = None
        self.errors: list[str] = []
        self.engine.on_snapshot = self._got
        self.engine.on_error = self.errors.append
        self.t0 = time.monotonic()
        self.engine.start()

    def _got(self, snap: Any) -> None:
        self.snaps += 1
        self.last = snap
        if self.first_at is None:
            self.first_at = time.monotonic() - self.t0


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="rw-hour-"))
    try:
        return run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp: Path) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--time-scale", type=float, default=60.0)
    p.add_argument("--market-min", type=float, default=60.0)
    p.add_argument(
        "--cli-in-process",
        action="store_true",
        help="the ledger and receipt queries call rentwatch's CLI in this process",
    )
    a = p.parse_args()
    scale, span = a.time_scale, a.market_min * 60
    os.environ["RENTWATCH_RUNTIME_DIR"] = str(tmp / "run")
    sim = SimServer(
        parse_scenario({"seed": 7, "offers": 60, "time_scale": scale}), api_key="bench-key"
    ).start_in_thread()
    camp, ledger = tmp / "hour.toml", tmp / "hour.duckdb"
    # jobs run on the simulated hosts: one `sleep` of 10 market minutes, and two that run until
    # the fleet is stopped (two wall hours at most, should this run be killed), so the fleet
    # works the whole time. The checks below take wall time of their own, and the market runs
    # on meanwhile: on a loaded box they outlast the hour many times over. So nothing here
    # may end the campaign by itself, however long they take: not a job's end or its timeout,
    # nor the budget
    forever = "i=0; until [ $i -ge 7200 ]; do sleep 1; i=$((i+1)); done"
    camp.write_text(CAMPAIGN.format(short=f"{600 / scale:.1f}", forever=forever))
    cmd = [sys.executable, "-m", "rentwatch", "run", "--headless", "--campaign", str(camp)]
    cmd += ["--market-url", sim.url, "--ledger", str(ledger), "--ssh-key", str(tmp / "key")]
    env = dict(os.environ, VAST_API_KEY=sim.api_key, PYTHONUNBUFFERED="1")
    wall0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True).start()
    while not any("controller API on unix:" in ln for ln in lines):
        if proc.poll() is not None or time.monotonic() - wall0 > 300:  # a ceiling on a hang
            print("".join(lines[-20:]))
            proc.terminate()
            return 1
        time.sleep(0.1)
    sock = next(ln for ln in lines if "unix:" in ln).split("unix:", 1)[1].strip()
    target = Target(socket=sock)
    start = float(sim.call(sim.market.clock.now))
    pair = [Watcher(target), Watcher(target)]  # two dashboards, the whole hour
    cycles: list[float] = []
    queries: list[float] = []
    history_ok = True
    for k in range(1, 11):  # ten attach/detach cycles spread over the hour
        # and each once the controller has said something: a starved one had not yet, at
        # the first, so there was no history to come with the attach
        while float(sim.call(sim.market.clock.now)) < start + span * k / 11 or not any(
            w.last is not None and w.last.decisions_total > 0 for w in pair
        ):
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        w = Watcher(target)
        while w.first_at is None and time.monotonic() - w.t0 < 300:  # a ceiling on a hang
            time.sleep(0.05)
        cycles.append(w.first_at if w.first_at is not None else float("inf"))
        history_ok &= bool(w.last is not None and w.last.decisions)
        w.engine.shutdown("leave")
        took, q = _cli(
            "ledger", "--ledger", str(ledger), "--json", "select count(*) n from events",
            in_process=a.cli_in_process,
        )  # fmt: skip
        assert q.returncode == 0, q.stderr
        queries.append(took)
        took, r = _cli("receipt", "--ledger", str(ledger), "--json", in_process=a.cli_in_process)
        assert r.returncode == 0, r.stderr
        queries.append(took)
    while float(sim.call(sim.market.clock.now)) < start + span:
        time.sleep(0.2)
    if proc.poll() is not None:  # it ended by itself before the hour: say how
        print("".join(lines[-15:]))
        return 1
    client = ControllerClient(target, timeout=120)
    client.shutdown("stop")
    client.close()
    code = proc.wait(300)
    wall = time.monotonic() - wall0
    for w in pair:
        w.engine.shutdown("leave")
    ids = [{i.instance_id for i in w.last.instances} for w in pair]

    led = Ledger(ledger, read_only=True)
    rows = led.instance_rows("hour")
    [receipt] = led.receipt("hour")
    end = max(e.at for e in led.events())
    led.close()
    truth = _truth(sim, end)
    market_min = (end - start) / 60
    worst = max(abs(r["total_usd"] - truth[r["instance_id"]]) for r in rows)
    truth_total = sum(truth.values())
    live = _live(sim)
    sim.stop_thread()
    ok = (
        code == 0
        and not live
        and worst <= 0.005
        and abs(receipt["total_usd"] - truth_total) <= 0.01
        and ids[0] == ids[1]
        and history_ok
    )
    print(
        json.dumps(
            {
                "time_scale": scale,
                "market_min": round(market_min, 1),
                "wall_s": round(wall, 1),
                "exit_code": code,
                "creates": receipt["creates"],
                "verified": receipt["verified"],
                "jobs_finished": receipt["jobs_finished"],
                "gpu_hours": round(receipt["gpu_hours"], 3),
                "receipt_usd": round(receipt["total_usd"], 4),
                "truth_usd": round(truth_total, 4),
                "worst_instance_diff_usd": round(worst, 5),
                "left_running": sorted(live),
                "attach_cycles": len(cycles),
                "first_snapshot_s_median": round(statistics.median(cycles), 3),
                "first_snapshot_s_max": round(max(cycles), 3),
                "history_on_every_attach": history_ok,
                "cli_queries": len(queries),
                "cli_query_s_median": round(statistics.median(queries), 2),
                "cli_query_s_max": round(max(queries), 2),
                "two_dashboards_snapshots": [w.snaps for w in pair],
                "two_dashboards_agree": ids[0] == ids[1],
                # what the two said about the controller (its goodbye at the stop, expected)
                "dashboard_notices": sorted({e.split(":")[0][:50] for w in pair for e in w.errors}),
                "ok": ok,
            },
            indent=1,
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
