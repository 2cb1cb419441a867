"""The CLI's service commands: `ls`, `run --background`, and the lookup that lets `ledger` and
`receipt` answer through the controller holding a ledger."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..run.service import api, registry
from ..run.service.remote import ControllerClient
from ..run.service.target import Target

# what `ls` adds to a registry entry from the controller's status
LIVE_FIGURES = "policy fleet held observed stopped verified in_service spent_usd dph finished"


def ls_rows(wall: Callable[[], float] = time.time) -> list[dict[str, Any]]:
    """One row per running controller, with its live figures when it answers."""
    rows = []
    now = wall()
    for e in registry.live_entries():
        row: dict[str, Any] = {**e.as_json(), "uptime_s": max(0.0, now - e.started_at)}
        with ControllerClient(Target(socket=e.socket), timeout=3.0) as client:
            try:
                st = client.status()
                row.update({k: st.get(k) for k in LIVE_FIGURES.split()})
            except api.ServiceError as exc:
                row["error"] = str(exc)
        rows.append(row)
    return rows


def cmd_ls(args: argparse.Namespace) -> int:
    rows = ls_rows()
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print("no controller is running")
        return 0
    from rich.table import Column, Table
    from rich.text import Text

    from ..core.decisions import fmt_span
    from .tables import print_table

    # the campaign and the socket (what `attach --socket` and an SSH forward take) are folded
    # whole onto more lines, never cut with an ellipsis (at 120 columns the socket was cut)
    table = Table(
        Column("campaign", overflow="fold"),
        "pid",
        "uptime",
        "fleet",
        "spend",
        "$/h",
        Column("socket", overflow="fold"),
    )
    for r in rows:
        # in service now out of wanted, as the dashboard's bar (`verified` counts every rental
        # that ever passed a preflight, stopped ones too: "4/3" over a fleet of stopped ones)
        serving = r.get("in_service")
        if serving is None:  # a controller from before `in_service` was served
            serving = r.get("verified", "?")
        more = "".join(f", {r[k]} {k}" for k in ("stopped", "observed") if r.get(k))
        fleet = f"{serving}/{r.get('fleet', '?')} ({r.get('held', '?')} held{more})"
        spend = f"${r['spent_usd']:.2f}" if isinstance(r.get("spent_usd"), float | int) else "?"
        dph = f"${r['dph']:.3f}" if isinstance(r.get("dph"), float | int) else "?"
        table.add_row(
            Text(str(r["campaign"])),  # campaign names are the operator's text: never markup
            str(r["pid"]),
            fmt_span(r["uptime_s"]),
            fleet if "error" not in r else Text(str(r["error"])[:60]),
            spend,
            dph,
            Text(str(r["socket"])),
        )
    print_table(table)
    for r in rows:
        if r.get("market_url"):  # a demo's own market, for the commands that take one
            url, key = r["market_url"], r.get("market_key_file")
            print(
                f"{r['campaign']}: market {url}, key in {key} "
                f"(VAST_API_KEY=$(cat {key}) rentwatch offers --market-url {url} --campaign FILE)"
            )
    return 0


def controller_for_ledger(ledger: str | Path) -> ControllerClient | None:
    found = registry.find(ledger=ledger, quiet=True)
    # a long query is the operator's to wait for (Ctrl-C hangs up, which cancels it)
    return ControllerClient(Target(socket=found[0].socket), timeout=3600.0) if found else None


def cmd_run_background(args: argparse.Namespace) -> int:
    """`rentwatch run --background`: the same run, in its own session (no terminal to lose), its
    log next to the ledger; returns once its API answers."""
    import os

    from ..ledger.store import default_ledger_path
    from ..run.service.spawn import ControllerFailed, spawn_controller

    ledger = Path(args.ledger or default_ledger_path()).resolve()
    from .flags import engine_argv

    argv = ["run", "--ledger", str(ledger), *engine_argv(args)]
    if args.http_timeout:
        argv += ["--http-timeout", str(args.http_timeout)]
    if args.detach:
        argv.append("--detach")
    if args.ssh_key:
        argv += ["--ssh-key", str(Path(args.ssh_key).resolve())]
    if args.listen:
        argv += ["--listen", args.listen]
    env = dict(os.environ)
    if args.api_key:  # through the environment: a flag would show in the process list
        env["VAST_API_KEY"] = args.api_key
    try:
        started = spawn_controller(argv, ledger, env)
    except ControllerFailed as exc:
        print(f"rentwatch: {exc}", file=sys.stderr)
        return 1
    entry = started.entry
    print(f"started  {entry.campaign}: pid {entry.pid}, socket {entry.socket}")
    print(f"log      {started.log}")
    print(f"attach   rentwatch attach --campaign {entry.campaign} --pid {entry.pid}")
    return 0
