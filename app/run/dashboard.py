"""Wiring the dashboard: engine thread, ledger, app; and the demo's simulated market."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.campaign import Campaign
from ..core.policy import Policy, get_policy
from ..engine.session import Session
from ..ledger import Ledger
from ..ledger.team.config import TeamConfig
from ..ledger.team.sync import TeamSync
from ..market.factory import load_campaign
from .alerts import alert_engine
from .engine_thread import EngineThread

if TYPE_CHECKING:
    from ..sim.server import SimServer

# the demo's campaign, shipped as a file in the package (pyproject's package-data)
DEMO_CAMPAIGN = (resources.files(__package__) / "demo.toml").read_text(encoding="utf-8")


def fresh_demo_name(ledger_path: Path, base: str = "demo") -> str:
    """Each demo run is its own campaign: a ledger that already holds `base` gets `base-2`,
    `base-3`, ... so two runs never mix their instances or receipts."""
    if not ledger_path.exists():
        return base
    with Ledger(ledger_path) as ledger:
        name, n = base, 1
        while ledger.last_event_at(name) is not None:
            n += 1
            name = f"{base}-{n}"
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


def watch_campaign() -> Campaign:
    """No campaign file: watch what the account runs, observe only, create nothing."""
    return Campaign(
        name="watch",
        image="",
        image_cuda=0.0,
        disk_gb=10,
        offer_query={},
        max_dph=0.0,
        fleet=0,
        max_creates=0,
        budget_usd=1e9,
    )


def make_engine(
    market_url: str,
    api_key: str,
    campaign: Campaign,
    policy: Policy,
    ledger: Ledger,
    key_path: Path,
    adopt_all: bool = False,
    observe_only: bool = False,
    log: Callable[[str], None] = lambda _: None,
) -> EngineThread:
    def open_session() -> Session:
        return Session.open(
            market_url,
            api_key,
            ledger,
            campaign,
            policy,
            key_path,
            log=log,
            adopt_all=adopt_all,
            observe_only=observe_only,
        )

    return EngineThread(open_session, on_snapshot=lambda _: None, on_error=lambda _: None)


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
    """The dashboard with its engine in this process (`--foreground`): the engine notifies and
    serves `--metrics` as a controller's does (`alert_engine`), and tells its end when it ends."""
    ledger = Ledger(ledger_path)
    camp = campaign or watch_campaign()
    # the team sync says nothing on a terminal the dashboard draws on
    sync = TeamSync(ledger, team, market_url, camp.name).start() if team else None
    engine = make_engine(
        market_url,
        api_key,
        camp,
        policy,
        ledger,
        key_path,
        # every instance of the account is shown; only what this campaign created (or the
        # operator hands over) is supervised; without a campaign, nothing is: observe only
        adopt_all=True,
        observe_only=campaign is None,
    )
    end_alerts = alert_engine(
        engine, ledger, notify, metrics_listen, (api_key, str(key_path)), who="dashboard"
    )
    from .service.controller import attach_in_process

    result = None
    code = 1
    try:
        # alerts that cannot start (a --metrics port in use) stop it here, as they stop a
        # controller: the engine started is ended below, and the error said
        app, finish = attach_in_process(engine, ledger, ledger_path, camp.name)
        try:
            result = app.run()
        finally:
            finish(result)  # the quit dialog's choice; without one (a crash), release what is held
        code = 1 if engine.failure else 0
    finally:
        if engine.loop is not None and engine.alive():
            engine.shutdown("trap")  # the app died without the quit dialog: release what is held
        end_alerts(code)
        if sync is not None:
            sync.stop()
        ledger.close()
    print(f"rentwatch: {result or 'closed'}; ledger at {ledger_path}")
    if engine.failure:  # the engine never worked, or stopped working: not a clean exit
        print(f"rentwatch: error: {engine.failure}", file=sys.stderr)
        return 1
    return 0


def run_demo(
    time_scale: float = 30.0,
    ledger_path: Path | None = None,
    seed: int = 7,
    team: TeamConfig | None = None,
) -> int:
    from platformdirs import user_data_dir

    data = Path(user_data_dir("rentwatch"))
    ledger_path = ledger_path or data / "demo-ledger.duckdb"
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
            data / "id_ed25519",
            team,
        )
    finally:
        sim.stop_thread()
