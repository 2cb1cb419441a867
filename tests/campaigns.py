"""Helpers shared by the engine tests: run a campaign headless against an in-process sim."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

from rentwatch.core.policy import get_policy
from rentwatch.market.factory import load_campaign
from rentwatch.referee.stepped import run_stepped, stepped_loop
from rentwatch.run.engine_thread import EngineThread
from rentwatch.run.host import run_headless

from .conftest import market_stands

CAMPAIGN = """
name = "{name}"
image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
image_cuda = "12.4"
disk_gb = 40
offer_query = "num_gpus=1 rentable=true"
max_dph = 0.60
fleet = {fleet}
max_creates = {max_creates}
budget_usd = 20.0
artifacts_dir = "artifacts"   # beside the test (its cwd), not in the user data directory
"""


def checkpointing_jobs(n: int, every_min: int, retries: int, ref_hours: float) -> str:
    """`n` sized jobs (j0, j1, ...) that save a checkpoint: what may go on the bid tier."""
    return "".join(
        f"""
[[jobs]]
name = "j{i}"
run = "mkdir -p ckpt{i} out && echo {i} > ckpt{i}/step && echo done > out/r.txt"
artifacts = ["out/r.txt"]
checkpoint = "ckpt{i}"
checkpoint_every_min = {every_min}
retries = {retries}
ref_gpu = "RTX 4090"
ref_hours = {ref_hours}
"""
        for i in range(n)
    )


def campaign_text(name: str = "t", fleet: int = 4, extra: str = "", max_creates: int = 60) -> str:
    return CAMPAIGN.format(name=name, fleet=fleet, max_creates=max_creates) + extra


def run_campaign(
    sim,
    tmp_path: Path,
    policy: str = "default",
    name: str = "t",
    fleet: int = 4,
    ledger: Path | None = None,
    extra: str = "",
    max_creates: int = 60,
    on_supervisor=None,
) -> tuple[int, Path]:
    ledger = ledger or tmp_path / f"{policy}.duckdb"
    campaign = load_campaign(campaign_text(name, fleet, extra, max_creates))
    return headless(sim, campaign, policy, ledger, tmp_path, on_supervisor), ledger


def headless(
    sim, campaign, policy: str, ledger: Path, tmp_path: Path, on_supervisor=None, url=None
) -> int:
    """`run_headless` in this process; on a stepped simulator (`make_sim(stepped=True)`) the
    engine runs on its clock (app/referee/stepped.py), so market time does not depend on how
    fast the box runs: a wait of the engine's ends at its market time, however loaded the box.
    `url`: where the engine reaches the market (a proxy in front of `sim`), if not `sim.url`."""
    stepped = getattr(sim, "stepped", False)  # (a stand-in with a url and a key: not stepped)
    clock = sim.market.clock if stepped else None
    main = run_headless(
        campaign,
        get_policy(policy).with_overrides(campaign.policy),
        url or sim.url,
        sim.api_key,
        str(ledger),
        key_path=str(tmp_path / "key"),
        hosted=on_supervisor and (lambda host, _: on_supervisor(host.sup)),
        market_clock=clock,
    )
    return run_stepped(sim, main) if stepped else asyncio.run(main)


def cli_on_stepped_clock(sim, monkeypatch) -> None:
    """`rentwatch run --headless` called in this process (`rentwatch.cli.main.main`) runs its
    engine on `sim`'s stepped clock, as `headless` does; the CLI's other calls (its check of
    the market first) run as they do."""
    import rentwatch.cli.commands as commands
    import rentwatch.run.host as module

    real, runs = module.run_headless, []

    def on_clock(*args, **kw):
        runs.append(real(*args, market_clock=sim.market.clock, **kw))
        return runs[-1]

    def run(main, **kw):
        return run_stepped(sim, main) if main in runs else asyncio.run(main, **kw)

    shim = types.ModuleType("asyncio")
    shim.__dict__.update(asyncio.__dict__, run=run)
    monkeypatch.setattr(module, "run_headless", on_clock)
    monkeypatch.setattr(commands, "asyncio", shim)


def stepped_engine(sim, campaign, ledger: Path, key_path: Path) -> EngineThread:
    """The dashboard's engine thread (`rentwatch.run.dashboard.run_dashboard`'s) on `sim`'s
    stepped clock: its loop's time is market time, so a loaded box is no lag, and it polls at
    the engine's own market cadence (no wall-second cap: that would be a poll a market
    second)."""
    run = functools.partial(
        run_headless,
        campaign,
        get_policy("default").with_overrides(campaign.policy),
        sim.url,
        sim.api_key,
        str(ledger),
        key_path=str(key_path),
        served=True,
        market_clock=sim.market.clock,
        log=lambda _: None,
    )
    return EngineThread(run, max_wall_poll=float("inf"), loop_factory=lambda: stepped_loop(sim))


@contextlib.contextmanager
def engine_stands(engine: EngineThread) -> Iterator[None]:
    """A `stepped_engine`'s market stands inside: its calls are answered and intents applied,
    but no market time passes, so what a test does in wall time (keys pressed on a loaded box)
    costs the market nothing and nothing happens meanwhile that the test did not ask for."""
    stepper = engine.loop.stepper  # type: ignore[union-attr]
    stepper.standing = True
    try:
        yield
    finally:
        stepper.standing = False


def run_headless_text(sim, tmp_path: Path, text: str, policy: str = "default") -> tuple[int, Path]:
    """`run_campaign` for a campaign written whole (its own offer query, say)."""
    ledger = tmp_path / f"{policy}.duckdb"
    return headless(sim, load_campaign(text), policy, ledger, tmp_path), ledger


def truth_at(sim, t: float) -> dict[int, dict]:
    """Per-instance charges as the market bills them up to market time `t`."""

    def compute():
        mode = sim.market.scenario.gpu_billing
        return {
            iid: {
                "behaviour": i.machine.behaviour,
                "machine_id": i.machine.id,
                "usd": i.charges(t, mode).total_usd,
                "destroyed": i.destroyed_at is not None,
                "stopped": i.intended == "stopped",
                "market_stop_at": i.market_stop_at,  # a stop of the market's own (contract end)
                "stops": list(i.stops),  # the market's time of each stop, whoever asked for it
                # when a container exited or its host went dark on its own, per start
                "halts": [g.halted_at for g in i.segments if g.halted_at is not None],
            }
            for iid, i in sim.market.instances.items()
        }

    return sim.call(compute)


def headless_env(sim, **extra: str) -> dict[str, str]:
    return dict(os.environ, VAST_API_KEY=sim.api_key, PYTHONUNBUFFERED="1", **extra)


def headless_cmd(sim, tmp_path: Path, campaign: Path, ledger: Path, *more: str) -> list[str]:
    """`rentwatch run --headless` against `sim`, as a separate process (for kills and signals)."""
    return [
        sys.executable,
        "-m",
        "rentwatch",
        "run",
        "--headless",
        "--campaign",
        str(campaign),
        "--market-url",
        sim.url,
        "--ledger",
        str(ledger),
        "--ssh-key",
        str(tmp_path / "key"),
        *more,
    ]


class HeadlessRun:
    """A `headless_cmd` process, its output read on a thread as it comes, line by line."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
        )
        self.adopted = threading.Event()  # its first adoption printed, or its output ended
        self._lines: queue.Queue[str | None] = queue.Queue()  # None: the output ended
        self._said: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._said.append(line)
            self._lines.put(line)
            if "adopt  i:" in line:
                self.adopted.set()
        self.adopted.set()
        self._lines.put(None)

    def readline(self, timeout: float) -> str:
        """Its next line; "" once its output ended or `timeout` wall seconds passed."""
        try:
            return self._lines.get(timeout=max(0.0, timeout)) or ""
        except queue.Empty:
            return ""

    def finish(self, timeout: float) -> str:
        """All it said, once it ended (killed if it runs past `timeout` wall seconds)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(30)
        return "".join(self._said)


def restarted(
    sim, cmd: list[str], env: dict[str, str], cwd: Path, between=lambda: None
) -> HeadlessRun:
    """The controller started again after its kill, the market standing still from this call
    until the new run has adopted what the killed one left live (its first "adopt" line);
    `between` runs while nothing watches (a key change, say). A loaded box took 140 of a 120x
    market's minutes to start it, past the 15 of the hosts' watchdog window: a host stopped
    itself, as it should with no controller, and a job that had exited there, its output not
    yet off, ran again elsewhere (finished twice)."""
    with market_stands(sim):
        between()
        run = HeadlessRun(cmd, env, cwd)
        # with nothing live no adoption comes: nothing to wait for
        if sim.call(lambda: any(i.destroyed_at is None for i in sim.market.instances.values())):
            run.adopted.wait(300)  # a ceiling on a hang only
    return run
