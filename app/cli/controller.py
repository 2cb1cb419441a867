"""`rentwatch controller`: the engine of `watch` and `demo` as a process of its own, which their
dashboard starts and attaches to. It polls until a shutdown or a signal (the exit trap); for
`demo` the simulated market lives here too, so leaving the demo running keeps its market alive."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.errors import RentwatchError
from ..core.text import clean
from ..run.exit_trap import ExitTrap
from ..run.service import registry


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {clean(line, 2000)}", flush=True)


def serve_engine(
    engine: Any, end_unwatched_s: float | None = None, market: tuple[str, Path] | None = None
) -> int:
    """Serve `engine` on the ledger's socket until a shutdown or a signal; with `end_unwatched_s`,
    also once no dashboard has watched that long and nobody chose to leave it running;
    `market`: the built-in market's URL and key file, added to the controller's entry."""
    woken = threading.Event()
    trap = ExitTrap(lambda _signum: woken.set(), _say)
    with trap.installed():
        try:
            sock = engine.start()
        except (OSError, RentwatchError) as exc:
            if engine.alive():
                engine.shutdown("trap")  # it may hold adopted rentals: release them, unwatched
            print(f"rentwatch: cannot start the controller: {clean(exc, 1000)}", file=sys.stderr)
            return 2
        engine.on_error = lambda msg: _say(f"error  {msg}")
        ctrl = engine.ctrl
        if market is not None:
            url, key_file = market
            for entry in registry.find(pid=os.getpid(), quiet=True):
                registry.register(replace(entry, market_url=url, market_key_file=str(key_file)))
        _say(f"serving  controller API on unix:{sock} for campaign {ctrl.campaign}")
        unwatched = False
        try:
            while engine.alive() and not trap.fired:
                woken.wait(0.5)
                if end_unwatched_s is not None and not ctrl.kept:
                    unwatched = ctrl.unwatched_for() >= end_unwatched_s
                    if unwatched:
                        _say(
                            f"end    nobody has watched for {end_unwatched_s / 60:.0f} min and "
                            "nobody chose to leave it running: stopping what it holds"
                        )
                        break
        finally:
            trap.ending = True
            mode = "trap" if trap.fired else ("unwatched" if unwatched else engine.exit_mode)
            if trap.fired:
                _say(f"trap   signal {trap.name()}: releasing what is held")
            engine.shutdown(mode, _say)
        _say(f"end    controller exits ({mode})")
        return trap.exit_code() if trap.fired else (1 if engine.failure else 0)


def cmd_controller(args: argparse.Namespace) -> int:
    from ..core.campaign import renting_nothing
    from ..core.policy import get_policy
    from ..engine.session import default_key_path
    from ..market.factory import DEFAULT_TIMEOUT
    from ..run.dashboard import demo_campaign, demo_market, hosted
    from .commands import _read_campaign, usable_key
    from .team import team_config

    ledger_path = Path(args.ledger).resolve()
    key_path = Path(args.ssh_key) if args.ssh_key else default_key_path()
    team = team_config(args)
    sim = None
    key_file = ledger_path.with_name(ledger_path.name + ".market-key")
    if args.demo:
        campaign = demo_campaign(ledger_path)
        sim = demo_market(args.seed, args.time_scale)
        market_url, api_key = sim.url, sim.api_key
        with contextlib.suppress(FileNotFoundError):
            key_file.unlink()
        fd = os.open(key_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(api_key + "\n")
        _say(
            f"market   built-in simulator at {market_url}, its key in {key_file} (both live "
            "as long as this controller; `rentwatch ls` names them)"
        )
    else:
        campaign = (
            _read_campaign(args.campaign, args.upload_root, args.ssh_key)
            if args.campaign
            else renting_nothing("watch")
        )
    policy = get_policy(args.policy).with_overrides(campaign.policy)
    if sim is None:  # the market first: one that cannot be used leaves no ledger or SSH key
        market_url = args.market_url
        api_key = usable_key(market_url, None, campaign.http_timeout_s or DEFAULT_TIMEOUT)
    # a demo nobody watches and nobody kept ends itself (another campaign never does)
    unwatched = args.end_unwatched_min * 60 if args.demo else None
    observe_only = not args.demo and not args.campaign
    try:
        with hosted(
            market_url,
            api_key,
            campaign,
            policy,
            ledger_path,
            key_path,
            observe_only,
            team,
            args.notify,
            args.metrics,
            log=_say,
        ) as host:
            market = (market_url, key_file) if sim is not None else None
            host.code = serve_engine(host.engine, unwatched, market)
            return host.code
    finally:
        if sim is not None:
            sim.stop_thread()
            with contextlib.suppress(FileNotFoundError):
                key_file.unlink()


def add_parser(sub: Any, positive: Any = float) -> None:
    from .flags import add_alert_flags, add_market_flag, add_policy_flag, add_upload_root_flag

    c = sub.add_parser(
        "controller",
        help="the engine of `watch`/`demo` as its own process (they start it; attach to it)",
    )
    c.add_argument("--demo", action="store_true", help="with the built-in simulated market")
    c.add_argument("--time-scale", type=positive, default=30.0, help="--demo: sim s per wall s")
    c.add_argument("--seed", type=int, default=7, help="--demo: the market's seed")
    c.add_argument("--campaign", help="campaign TOML; without one (and --demo), observe only")
    add_market_flag(c)
    c.add_argument("--ledger", required=True, help="ledger file")
    add_policy_flag(c)
    c.add_argument("--ssh-key", help="rentwatch's SSH key (default: in the user's data dir)")
    c.add_argument(
        "--end-unwatched-min",
        type=positive,
        default=15.0,
        help="--demo: end once no dashboard has watched this long and nobody left it running",
    )
    from .team import add_team_flags

    add_alert_flags(c)
    add_upload_root_flag(c)
    add_team_flags(c)
    c.set_defaults(fn=cmd_controller)
