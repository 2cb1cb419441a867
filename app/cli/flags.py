"""Options shared by the commands that run an engine."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_upload_root_flag(p: argparse.ArgumentParser) -> None:
    """`--upload-root DIR`, for every command that reads a campaign to run (run, watch,
    controller): the folder its `upload` paths must resolve inside."""
    p.add_argument(
        "--upload-root",
        metavar="DIR",
        help="the folder the campaign's upload paths must resolve inside (default: the "
        "campaign file's folder)",
    )


def add_alert_flags(p: argparse.ArgumentParser) -> None:
    """`--notify URL` (repeatable) and `--metrics HOST:PORT`, for commands that run an engine."""
    p.add_argument(
        "--notify",
        action="append",
        default=[],
        metavar="URL",
        help="an apprise URL to notify (repeatable; adds to the campaign's `notify`)",
    )
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (loopback by default)",
    )


def add_market_flag(p: argparse.ArgumentParser, api_key: bool = False) -> None:
    """`--market-url URL`: the marketplace a command talks to (Vast's own unless given); with
    `api_key`, the `--api-key` beside it."""
    from ..market.factory import DEFAULT_URL

    p.add_argument(
        "--market-url",
        default=DEFAULT_URL,
        metavar="URL",
        help="the marketplace's base URL: Vast.ai's, or a simulator's (the URL `rentwatch sim` "
        "prints) (default: %(default)s)",
    )
    if api_key:
        p.add_argument(
            "--api-key", help="prefer VAST_API_KEY (this flag shows in the process list)"
        )


def add_policy_flag(p: argparse.ArgumentParser) -> None:
    """`--policy NAME`: which of the engine's policies rents and replaces instances."""
    from ..core.policy import POLICIES

    p.add_argument(
        "--policy",
        default="default",
        metavar="NAME",
        help=f"how offers are ranked, bid on and replaced: {', '.join(POLICIES)} (docs/campaigns.md, "
        "Policies; a campaign's [policy] table overrides its settings) (default: "
        "%(default)s)",
    )


def engine_argv(args: argparse.Namespace) -> list[str]:
    """The engine's flags of this command again, for the controller it starts: files as
    absolute paths (the controller has a cwd of its own), the team as `team_argv` hands it."""
    from .team import team_argv, team_config

    argv = ["--market-url", args.market_url, "--policy", args.policy]
    for url in args.notify:
        argv += ["--notify", url]
    if args.metrics:
        argv += ["--metrics", args.metrics]
    for flag, path in (("--campaign", args.campaign), ("--upload-root", args.upload_root)):
        if path:
            argv += [flag, str(Path(path).resolve())]
    return argv + team_argv(team_config(args))
