"""The engine at scale, under the real market's paging (25 rows a page) and pacing.

Two measurements, each against a simulator in its own process (its CPU and memory are not
counted) whose account already rents the fleet (`preload`: N instances, the last 10 still
booting; the rest proven by an earlier run, as the ledger says):

- *engine CPU per poll*: the controller process's own CPU for one `poll_once` (the poll
  plan's list calls, reading the rows, the rules over the whole fleet, the ledger writes), with
  the simulator's pacing off (`pacing = false`) and no client pacing, so nothing is waited for;
- *freshness*: the market seconds between two sightings of a booting instance while the
  supervisor runs the engine's loop (a poll every 10 s of market time, the campaign's
  interval, or at once when a poll took longer), with the
  simulator enforcing the documented intervals and the client pacing itself like the real one.

- *engine CPU per poll with jobs queued*: the same, for a campaign whose sized jobs outnumber
  its proven hosts (`--queue HOSTS:JOBS`), at a time scale where each poll spans a market
  minute or more, so the swap watch (`engine/jobs/swap_watch.py`) and the ranking by delivered
  work read our record as often as they would in a fast referee run; with the alerts listening
  after each poll (`run/alerts.py`), as in a headless run that notifies someone.

The watchdogs of the proven rentals are not started (they are SSH work, not the poll's).
Run: python -m bench.engine_bench [--sizes 100,1000,10000] [--seconds 120] [--queue 10:40]
(`--sizes 0` leaves out the fleet sizes: the queue case alone)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from rentwatch.core.campaign import Campaign, Job, renting_nothing
from rentwatch.core.policy import get_policy
from rentwatch.engine.hosts.ssh import SSHRunner, load_or_create_key
from rentwatch.engine.supervisor import Supervisor
from rentwatch.ledger import EventKind, Ledger
from rentwatch.market.vast.client import VastClient
from rentwatch.run.alerts import Alerts

BOOTING = 10  # instances still booting in every fleet
TIME_SCALE = 4.0  # market seconds per wall second in the freshness run


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _sim(tmp: Path, n: int, paced: bool, scale: float) -> tuple[subprocess.Popen[str], str]:
    scen = tmp / f"s{n}{paced}.toml"
    scen.write_text(
        f"seed = 1\ntime_scale = {scale}\noffers = {n}\npacing = {str(paced).lower()}\n"
        f"preload = {n}\npreload_booting = {BOOTING}\n"
        'preload_label = "rw:watch"\n'  # the watch campaign's own: supervised, not observed
        # pulls of 40-50 min: the preloaded hour-old rentals run, the new ones still boot
        # after the setup (a paced full list of 10,000 is 400 market seconds)
        '[[host_class]]\nbehaviour = "healthy"\nshare = 1\npull_min = [40, 50]\n'
    )
    sim = subprocess.Popen(
        [sys.executable, "-m", "rentwatch", "sim", "--scenario", str(scen), "--api-key", "b"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sim.stdout is not None
    return sim, sim.stdout.readline().strip()


async def preloaded_supervisor(
    url: str,
    tmp: Path,
    n: int,
    booting: int = BOOTING,
    paced: bool = False,
    key: str = "b",
    campaign: Campaign | None = None,
) -> Supervisor:
    """A supervisor that adopts a preloaded fleet (labels `rw:watch:I`): the first `n -
    booting` proven by an earlier run, as its ledger says; their watchdogs are not started.
    `tests/test_cadence.py` drives the same one."""
    client = VastClient(url, key, min_intervals=None if paced else {})
    await client.sync_clock()
    ledger = Ledger(tmp / f"l{n}{paced}.duckdb")
    now = client.now()
    for row in await client.list_instances():
        if row.label:  # created by this ledger's campaign: its own, supervised
            ledger.record(
                EventKind.CREATE,
                at=row.start_date if row.start_date is not None else now,
                actor="engine",
                reason="created by an earlier run",
                ok=True,
                detail={"label": row.label},
                campaign="watch",
                instance_id=row.id,
            )
        if row.label and int(row.label.rsplit(":", 1)[1]) < n - booting:
            ledger.record(
                EventKind.PREFLIGHT_PASSED,
                at=now - 1800,
                actor="engine",
                reason="proven by an earlier run",
                instance_id=row.id,
            )
    sup = Supervisor(
        client,
        ledger,
        campaign or renting_nothing("watch"),
        get_policy("default"),
        SSHRunner(load_or_create_key(tmp / "key")),
        log=lambda _: None,
        adopt_all=True,
    )

    async def no_watchdog(_a: object) -> None:
        return None

    sup.tender.tend = no_watchdog  # type: ignore[method-assign]
    await sup.prepare()
    return sup


async def engine_cpu(n: int, tmp: Path) -> tuple[float, float, float]:
    """Median and max CPU seconds of one poll, and the controller's RSS (MB)."""
    sim, url = _sim(tmp, n, paced=False, scale=1.0)
    try:
        sup = await preloaded_supervisor(url, tmp, n)
        for _ in range(2):
            await sup.poll_once()
        cpu = []
        for _ in range(10):
            c0 = time.process_time()
            await sup.poll_once()
            cpu.append(time.process_time() - c0)
        await sup.close()
        return statistics.median(cpu), max(cpu), rss_mb()
    finally:
        sim.terminate()
        sim.wait()


QUEUE_SCALE = 1200.0  # market seconds per wall second in the queue case: a poll spans a minute


def queued_campaign(hosts: int, jobs: int) -> Campaign:
    """The preloaded account's own campaign ("watch", whose labels the preload carries), with
    `jobs` sized jobs for its `hosts` proven rentals: most of them wait in the queue."""
    sized = tuple(
        Job(name=f"q-{i}", run="true", ref_gpu="RTX 4090", ref_hours=2.0, retries=1)
        for i in range(jobs)
    )
    return replace(
        renting_nothing("watch"),
        image="pytorch/pytorch",
        max_dph=1.0,
        fleet=hosts,
        max_creates=hosts,
        jobs=sized,
    )


async def queue_cpu(
    hosts: int, jobs: int, tmp: Path, polls: int = 20, reread: bool = False
) -> tuple[float, float]:
    """Median and max CPU seconds of one poll while `jobs` sized jobs wait for `hosts` proven
    rentals (the jobs are dispatched over the first polls, which are not counted). `reread`:
    our record is read from the ledger at every ask, as a ledger another process writes is
    (what every ledger did before the record reads were kept between events)."""
    sim, url = _sim(tmp, hosts + BOOTING, paced=False, scale=QUEUE_SCALE)
    try:
        sup = await preloaded_supervisor(
            url, tmp, hosts + BOOTING, campaign=queued_campaign(hosts, jobs)
        )
        if reread:
            sup.ledger._written = lambda: None  # type: ignore[method-assign]
        # as a headless run with a notifier has them (without one or metrics they read nothing)
        Alerts(sup, sup.ledger, notifier=SimpleNamespace(notify=lambda _: None)).attach()
        for _ in range(3):
            await sup.poll_once()
        cpu = []
        for _ in range(polls):
            c0 = time.process_time()
            await sup.poll_once()
            cpu.append(time.process_time() - c0)
            await asyncio.sleep(0.02)  # the loop's floor between polls
        queued = sum(1 for j in sup.jobs.jobs if j.status == "pending")
        await sup.close()
        if queued == 0:
            raise RuntimeError("no job was left queued: the case measured nothing")
        return statistics.median(cpu), max(cpu)
    finally:
        sim.terminate()
        sim.wait()


async def freshness(n: int, tmp: Path, seconds: float) -> tuple[float, float, float, int]:
    """Market seconds between two sightings of a booting instance (median, max), the
    market seconds one poll took (median), and how many gaps were measured."""
    sim, url = _sim(tmp, n, paced=True, scale=TIME_SCALE)
    try:
        sup = await preloaded_supervisor(url, tmp, n, paced=True)
        seen: dict[int, list[float]] = {}
        see = sup.observer._see

        def spy(a, inst, now):  # type: ignore[no-untyped-def]
            if a.life.phase.value in ("requested", "booting"):
                seen.setdefault(a.instance_id, []).append(now)
            see(a, inst, now)

        sup.observer._see = spy  # type: ignore[method-assign]
        market = sup.market
        end = market.now() + seconds
        polls = []
        while market.now() < end:  # the engine's loop (app/engine.py): start to start
            t0, w0 = market.now(), time.monotonic()
            await sup.poll_once()
            polls.append(market.now() - t0)
            await asyncio.sleep(max(0.0, sup.poll_wait(60.0, 0.02) - (time.monotonic() - w0)))
        await sup.close()
        gaps = [b - a for times in seen.values() for a, b in zip(times, times[1:], strict=False)]
        if not gaps:
            return float("nan"), float("nan"), statistics.median(polls), 0
        return statistics.median(gaps), max(gaps), statistics.median(polls), len(gaps)
    finally:
        sim.terminate()
        sim.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--seconds", type=float, default=120.0, help="market seconds per run")
    ap.add_argument("--queue", default="10:40", help="HOSTS:JOBS for the queue case ('' skips)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if int(s) > 0]
    # the ledger commits each event durably; on tmpfs when there is one, so the setup's
    # thousands of adoption facts do not take minutes (the poll writes few)
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as d:
        tmp = Path(d)
        print(f"{'instances':>9} {'CPU/poll median':>16} {'(max)':>8} {'RSS':>7}")
        for n in sizes:
            med, worst, rss = asyncio.run(engine_cpu(n, tmp))
            print(f"{n:9d} {med * 1000:13.0f} ms {worst * 1000:5.0f} ms {rss:4.0f} MB")
        if args.queue:
            hosts, jobs = (int(x) for x in args.queue.split(":"))
            print(
                f"\njobs queued: {jobs} sized jobs on {hosts} proven hosts, time scale "
                f"{QUEUE_SCALE:g}, CPU per poll"
            )
            got = {}
            for reread in (True, False):
                med, worst = asyncio.run(queue_cpu(hosts, jobs, tmp, reread=reread))
                got[reread] = med
                how = "record read at every ask" if reread else "record kept between events"
                print(f"{how:>27}: median {med * 1000:5.0f} ms (max {worst * 1000:.0f} ms)")
            print(f"{'ratio':>27}: {got[True] / max(got[False], 1e-9):.1f}x")
        if not sizes:
            return
        print(
            f"\nfreshness of a booting instance, market seconds (paced, time scale {TIME_SCALE:g})"
        )
        print(f"{'instances':>9} {'gap median':>11} {'(max)':>7} {'poll took':>10} {'gaps':>5}")
        for n in sizes:
            med, worst, poll, count = asyncio.run(freshness(n, tmp, args.seconds))
            print(f"{n:9d} {med:9.1f} s {worst:5.1f} s {poll:8.1f} s {count:5d}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
