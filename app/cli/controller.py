"""`rentwatch controller`: the engine of `watch` and `demo` as a process of its own, which their
dashboard starts and attaches to, hosted as `rentwatch run` hosts it. It polls until a shutdown or
a signal (the exit trap); for `demo` the simulated market lives here too, so leaving the demo
running keeps its market alive."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from ..core.text import clean


def _say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {clean(line, 2000)}", flush=True)


def cmd_controller(args: argparse.Namespace) -> int:
    from ..core.campaign import renting_nothing
    from ..core.policy import get_policy
    from ..engine.session import default_key_path
    from ..market.factory import DEFAULT_TIMEOUT
    from ..run.dashboard import demo_campaign, demo_market
    from ..run.host import Hosting, run_headless
    from ..run.service import registry
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
        registry.write_private(key_file, api_key + "\n")
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
    plan = Hosting(
        for_dashboards=True,
        end_unwatched_s=unwatched,
        cap_s=1.0,
        market_entry=(market_url, str(key_file)) if sim is not None else None,
    )
    try:
        return asyncio.run(
            run_headless(
                campaign,
                policy,
                market_url,
                api_key,
                str(ledger_path),
                key_path=str(key_path),
                notify=args.notify,
                metrics_listen=args.metrics,
                team=team,
                served=True,
                adopt_all=True,
                observe_only=observe_only,
                hosting=plan,
                log=_say,
            )
        )
    finally:
        if sim is not None:
            sim.stop_thread()
            key_file.unlink(missing_ok=True)


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
