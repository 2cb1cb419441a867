"""The CLI's service commands: `rentwatch ls`, `rentwatch attach`, and the lookup that lets
`rentwatch ledger` and `rentwatch receipt` answer through the controller holding a ledger."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import api, registry
from .client import ControllerClient, RemoteEngine, RemoteLedger, Target, resolve


def _fmt_uptime(seconds: float) -> str:
    s = int(seconds)
    return (
        f"{s // 86400}d{s % 86400 // 3600:02d}h"
        if s >= 86400
        else f"{s // 3600}h{s % 3600 // 60:02d}m"
    )


def ls_rows(wall: Callable[[], float] = time.time) -> list[dict[str, Any]]:
    """One row per running controller, with its live figures when it answers."""
    rows = []
    now = wall()
    for e in registry.live_entries():
        row: dict[str, Any] = {**e.as_json(), "uptime_s": registry.uptime(e, now)}
        client = ControllerClient(Target(socket=e.socket), timeout=3.0)
        try:
            st = client.status()
            row.update(
                {
                    k: st.get(k)
                    for k in ("policy", "fleet", "held", "verified", "spent_usd", "dph", "finished")
                }
            )
        except api.ServiceError as exc:
            row["error"] = str(exc)
        finally:
            client.close()
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
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table("campaign", "pid", "uptime", "fleet", "spend", "$/h", "socket")
    for r in rows:
        fleet = f"{r.get('verified', '?')}/{r.get('fleet', '?')} ({r.get('held', '?')} held)"
        spend = f"${r['spent_usd']:.2f}" if isinstance(r.get("spent_usd"), float | int) else "?"
        dph = f"${r['dph']:.3f}" if isinstance(r.get("dph"), float | int) else "?"
        table.add_row(
            Text(str(r["campaign"])),  # campaign names are the operator's text: never markup
            str(r["pid"]),
            _fmt_uptime(r["uptime_s"]),
            fleet if "error" not in r else Text(str(r["error"])[:60]),
            spend,
            dph,
            Text(str(r["socket"])),
        )
    Console().print(table)
    return 0


def controller_for_ledger(ledger: str | Path) -> ControllerClient | None:
    """A client for the controller holding `ledger`, or None when no running one does."""
    try:
        found = registry.find(ledger=ledger)
    except OSError:
        return None  # no runtime dir at all: no controller could have registered
    # a long query is the operator's to wait for (Ctrl-C hangs up, which cancels it)
    return ControllerClient(Target(socket=found[0].socket), timeout=3600.0) if found else None


def cmd_attach(args: argparse.Namespace) -> int:
    from rentwatch.widgets.app import RentwatchApp

    target = resolve(args.socket, args.campaign, args.url, args.token_file)
    client = ControllerClient(target, timeout=5.0)
    try:
        status = client.status()  # fail here, plainly, rather than in an empty dashboard
    finally:
        client.close()
    engine = RemoteEngine(target)
    ledger = RemoteLedger(target, str(status.get("ledger", "")))
    app = RentwatchApp(engine, ledger)
    try:
        result = app.run()
    finally:
        if engine.alive():
            engine.shutdown("detach")  # a crashed dashboard never stops a remote campaign
        ledger.close()
    if result == "stop":
        print(f"rentwatch: asked the controller of {status['campaign']} to stop everything held")
    else:
        print(f"rentwatch: detached; {status['campaign']} still runs at {target.describe()}")
    return 0


def cmd_run_background(
    args: argparse.Namespace, monotonic: Callable[[], float] = time.monotonic
) -> int:
    """`rentwatch run --background`: the same headless run, in its own session (no terminal
    to lose), its log next to the ledger; returns once its API answers."""
    import os
    import subprocess
    import sys
    import time

    from ..ledger.store import default_ledger_path

    ledger = Path(args.ledger or default_ledger_path()).resolve()
    argv = [sys.executable, "-m", "rentwatch", "run", "--headless"]
    argv += ["--campaign", str(Path(args.campaign).resolve()), "--market-url", args.market_url]
    argv += ["--ledger", str(ledger), "--policy", args.policy]
    if getattr(args, "http_timeout", None):
        argv += ["--http-timeout", str(args.http_timeout)]
    if args.detach:
        argv.append("--detach")
    if args.ssh_key:
        argv += ["--ssh-key", str(Path(args.ssh_key).resolve())]
    if args.listen:
        argv += ["--listen", args.listen]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.api_key:  # through the environment: a flag would show in the process list
        env["VAST_API_KEY"] = args.api_key
    ledger.parent.mkdir(parents=True, exist_ok=True)
    log_path = ledger.with_name(ledger.name + ".log")
    fd = os.open(log_path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "a") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # no SIGHUP when this terminal goes
            cwd=str(ledger.parent),
        )
    deadline = monotonic() + 60  # the controller registers itself within a minute, or failed
    while monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-10:]
            print("\n".join(tail), file=sys.stderr)
            print(f"rentwatch: the controller exited with {code}; log: {log_path}", file=sys.stderr)
            return code or 1
        mine = [e for e in registry.live_entries() if e.pid == proc.pid]
        if mine:
            print(f"started  {mine[0].campaign}: pid {proc.pid}, socket {mine[0].socket}")
            print(f"log      {log_path}")
            print(f"attach   rentwatch attach --campaign {mine[0].campaign}")
            return 0
        time.sleep(0.2)
    print(
        f"rentwatch: pid {proc.pid} did not answer within a minute; log: {log_path}",
        file=sys.stderr,
    )
    return 1


def start_in_background(args: argparse.Namespace) -> Target:
    """Start `args.campaign`'s controller in its own process (as `run --background` does) and
    return where it answers; raises with the controller's own last words when it does not."""
    from ..core.errors import ConfigError
    from ..ledger.store import default_ledger_path

    if not args.campaign:
        raise ConfigError("--background needs --campaign FILE (the campaign the controller runs)")
    ledger = Path(args.ledger or default_ledger_path()).resolve()
    started = cmd_run_background(
        argparse.Namespace(
            campaign=args.campaign,
            market_url=args.market_url,
            ledger=str(ledger),
            policy=args.policy,
            http_timeout=args.http_timeout,
            detach=False,
            ssh_key=getattr(args, "ssh_key", None),
            listen=None,
            api_key=None,  # the key stays in the environment it came from
        )
    )
    if started:
        raise BackgroundFailed(f"the controller did not start (exit {started}); see its log above")
    entry = next(e for e in registry.live_entries() if Path(e.ledger) == ledger)
    return Target(socket=entry.socket)


class BackgroundFailed(api.ServiceError):
    title = "controller"


def cmd_watch_background(args: argparse.Namespace) -> int:
    """`rentwatch watch --campaign FILE --background`: the engine in its own process and this
    dashboard attached to it, the same client code as `attach`. Quitting asks: stop the campaign
    (the controller stops or destroys what it holds and exits), or detach and leave it running
    in the background, supervised, for a later `rentwatch attach`."""
    target = start_in_background(args)
    return cmd_attach(
        argparse.Namespace(socket=target.socket, campaign=None, url=None, token_file=None)
    )
