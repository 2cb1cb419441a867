"""Wiring the `--foreground` dashboard: its engine thread and app; and the demo's market."""

from __future__ import annotations

import functools
import os
import secrets
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.campaign import Campaign, renting_nothing
from ..core.policy import Policy, get_policy
from ..engine.session import default_key_path
from ..ledger import Ledger
from ..ledger.team.config import TeamConfig
from ..market.factory import load_campaign
from .engine_thread import EngineThread
from .host import run_headless
from .service.remote import ControllerClient, RemoteEngine
from .service.target import Target

if TYPE_CHECKING:
    from ..sim.server import SimServer

# the demo's campaign, shipped as a file in the package (pyproject's package-data)
DEMO_CAMPAIGN = (resources.files(__package__) / "demo.toml").read_text(encoding="utf-8")


def fresh_demo_name(ledger_path: Path) -> str:
    """Each demo run is its own campaign: a ledger that already holds `demo` gets `demo-2`,
    `demo-3`, ... so two runs never mix their instances or receipts."""
    if not ledger_path.exists():
        return "demo"
    with Ledger(ledger_path) as ledger:
        name, n = "demo", 1
        while ledger.last_event_at(name) is not None:
            n += 1
            name = f"demo-{n}"
    return name


def demo_campaign(ledger_path: Path) -> Campaign:
    """The demo's campaign, under the name `fresh_demo_name` gives it in this ledger."""
    name = fresh_demo_name(ledger_path)
    return load_campaign(DEMO_CAMPAIGN.replace('name = "demo"', f"name = {name!r}", 1), "demo")


def demo_market(seed: int, time_scale: float) -> SimServer:
    """The demo's simulated market (the article's), started on a thread of its own."""
    from ..sim.scenario import parse_scenario
    from ..sim.server import SimServer

    scenario = parse_scenario({"seed": seed, "time_scale": time_scale, "name": "article"})
    return SimServer(scenario, api_key=secrets.token_hex(12)).start_in_thread()


def make_engine(
    market_url: str,
    api_key: str,
    campaign: Campaign,
    policy: Policy,
    ledger_path: Path,
    key_path: Path,
    adopt_all: bool = False,
    observe_only: bool = False,
    team: TeamConfig | None = None,
    notify: Sequence[str] = (),
    metrics_listen: str | None = None,
) -> EngineThread:
    """The `--foreground` dashboard's engine, hosted as a controller's is, its alerts and team
    sync beside it, saying nothing on the terminal the dashboard draws on."""
    run = functools.partial(
        run_headless,
        campaign,
        policy,
        market_url,
        api_key,
        str(ledger_path),
        key_path=str(key_path),
        notify=notify,
        metrics_listen=metrics_listen,
        team=team,
        served=True,
        adopt_all=adopt_all,
        observe_only=observe_only,
        log=lambda _: None,
    )
    return EngineThread(run)


def attach_in_process(engine: EngineThread) -> tuple[Any, Callable[[str | None], None]]:
    """The dashboard of `watch --foreground` and `demo --foreground`: the engine in this process,
    served on a socket, the app attached through the client; quitting ends the engine. Returns
    the app and what to call once it has quit."""
    from rentwatch.widgets.app import RentwatchApp

    print("rentwatch: starting the engine…", flush=True)
    sock = engine.start()
    target = Target(socket=sock)
    remote = RemoteEngine(target, os.getpid(), outlives_dashboard=False)
    app = RentwatchApp(remote, ControllerClient(target, timeout=600.0))

    def finish(mode: str | None) -> None:
        if remote.alive():  # the app ended without its quit dialog: its stream ends with it
            remote.shutdown("leave")
        engine.shutdown(mode if mode in ("stop", "detach") else "trap")

    return app, finish


def run_dashboard(
    market_url: str,
    api_key: str,
    campaign: Campaign | None,
    policy: Policy,
    ledger_path: Path,
    key_path: Path,
    team: TeamConfig | None = None,
    notify: Sequence[str] = (),
    metrics_listen: str | None = None,
) -> int:
    """The dashboard with its engine in this process (`--foreground`)."""
    engine = make_engine(
        market_url,
        api_key,
        campaign or renting_nothing("watch"),
        policy,
        ledger_path,
        key_path,
        # every instance of the account is shown; only what this campaign created (or the
        # operator hands over) is supervised; without a campaign, nothing is: observe only
        adopt_all=True,
        observe_only=campaign is None,
        team=team,
        notify=notify,
        metrics_listen=metrics_listen,
    )
    result = None
    try:
        # alerts that cannot start (a --metrics port in use) stop it here, as they stop a
        # controller: the engine started is ended on the way out, and the error said
        app, finish = attach_in_process(engine)
        try:
            result = app.run()
        finally:
            finish(result)  # the quit dialog's choice; without one (a crash), release what is held
    finally:
        if engine.alive():
            engine.shutdown("trap")
    print(f"rentwatch: {result or 'closed'}; ledger at {ledger_path}")
    if engine.failure:  # the engine never worked, or stopped working: not a clean exit
        print(f"rentwatch: error: {engine.failure}", file=sys.stderr)
        return 1
    return 0


def run_demo(time_scale: float, ledger_path: Path, seed: int, team: TeamConfig | None) -> int:
    campaign = demo_campaign(ledger_path)
    if campaign.name != "demo":
        print(
            f"rentwatch: {ledger_path} holds earlier demo runs; this one is campaign "
            f"{campaign.name!r}"
        )
    sim = demo_market(seed, time_scale)
    try:
        return run_dashboard(
            sim.url,
            sim.api_key,
            campaign,
            get_policy("default"),
            ledger_path,
            default_key_path(),
            team,
        )
    finally:
        sim.stop_thread()
