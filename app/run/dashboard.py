"""Wiring the `--foreground` dashboard: engine thread, ledger, alerts, app; and the demo's market."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.campaign import Campaign, renting_nothing
from ..core.policy import Policy, get_policy
from ..engine.session import Session, default_key_path
from ..engine.supervisor import Supervisor
from ..ledger import Ledger
from ..ledger.team.config import TeamConfig
from ..ledger.team.sync import TeamSync
from ..market.factory import load_campaign
from .alerts import Alerts, open_alerts
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


def make_engine(
    market_url: str,
    api_key: str,
    campaign: Campaign,
    policy: Policy,
    ledger: Ledger,
    key_path: Path,
    adopt_all: bool = False,
    observe_only: bool = False,
    open_alerts: Callable[[Supervisor], Alerts] | None = None,
    sync: TeamSync | None = None,
) -> EngineThread:
    def open_session() -> Session:
        return Session.open(
            market_url,
            api_key,
            ledger,
            campaign,
            policy,
            key_path,
            log=lambda _: None,
            adopt_all=adopt_all,
            observe_only=observe_only,
        )

    return EngineThread(open_session, lambda _: None, open_alerts=open_alerts, sync=sync)


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
    """The dashboard with its engine in this process (`--foreground`), hosted as a controller's
    is, its alerts and team sync beside it; the team sync says nothing on a terminal the
    dashboard draws on."""
    from .service.controller import attach_in_process

    camp = campaign or renting_nothing("watch")
    ledger = Ledger(ledger_path)
    sync = TeamSync(ledger, team, market_url, camp.name, lambda _: None).start() if team else None
    hidden = (api_key, str(key_path))  # never in a notice
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
        open_alerts=lambda sup: open_alerts(sup, ledger, notify, metrics_listen, hidden),
        sync=sync,
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
        if sync is not None and engine.host is None:  # a host stops the sync it was given
            sync.stop()
        ledger.close()
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
