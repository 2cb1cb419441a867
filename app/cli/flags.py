"""Options shared by the commands that run an engine."""

from __future__ import annotations

import argparse


def add_alert_flags(p: argparse.ArgumentParser) -> None:
    """`--notify URL` (repeatable) and `--metrics HOST:PORT`, for every command that runs an
    engine (run, watch, controller)."""
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
