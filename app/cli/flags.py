"""Options shared by the commands that run an engine."""

from __future__ import annotations

import argparse


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
