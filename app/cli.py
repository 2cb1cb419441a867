"""The `rentwatch` command line: one subcommand per task (each lists its own options with
`rentwatch COMMAND --help`); plain `rentwatch` is `rentwatch watch`."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from .core.errors import RentwatchError
from .core.text import clean


def _read_text(path: str, what: str) -> str:
    """A file the operator named, as text; any way it cannot be read is one ConfigError line."""
    from pathlib import Path

    from .core.errors import ConfigError

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


if TYPE_CHECKING:
    from .core.campaign import Campaign


def _cmd_sim(args: argparse.Namespace) -> int:
    from .sim.scenario import load_scenario
    from .sim.server import SimServer

    if args.scenario:
        _read_text(args.scenario, "scenario")  # unreadable or not UTF-8: one line, exit 2
    scenario = load_scenario(args.scenario)
    server = SimServer(scenario, port=args.port, api_key=args.api_key)

    async def main() -> None:
        await server.start()
        print(server.url, flush=True)
        if not args.api_key:
            print(f"api key: {server.api_key}", flush=True)
        print(
            f"scenario {scenario.name}: seed {scenario.seed}, {scenario.offers} offers, "
            f"time scale {scenario.time_scale:g}x, gpu billing from {scenario.gpu_billing}",
            flush=True,
        )
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the port is taken or not ours to use
        raise SimCannotListen(f"port {args.port}: {exc.strerror or exc}") from None
    return 0


class SimCannotListen(RentwatchError):
    title = "cannot start the simulated market"


def _open_ledger(path: str | None, read_only: bool = True):  # type: ignore[no-untyped-def]
    from .ledger import Ledger
    from .ledger.store import default_ledger_path

    return Ledger(path or default_ledger_path(), read_only=read_only)


def _service_cmd(name: str, args: argparse.Namespace) -> int:
    from .service import commands

    return int(getattr(commands, name)(args))


def _remote_ledger(path: str | None):  # type: ignore[no-untyped-def]
    from .ledger.store import default_ledger_path
    from .service.commands import controller_for_ledger

    return controller_for_ledger(path or default_ledger_path())


def _cmd_receipt(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from .ledger.receipt import format_receipt

    remote = _remote_ledger(args.ledger)
    if remote is not None:  # a running controller holds the file: it answers
        receipts = remote.receipt(args.campaign)
        remote.close()
    else:
        with _open_ledger(args.ledger) as ledger:
            receipts = ledger.receipt(args.campaign)
    if args.campaign and not receipts:
        print(f"rentwatch: no campaign {args.campaign!r} in the ledger", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(receipts[0] if args.campaign else receipts, indent=2))
        return 0
    console = Console()
    if not receipts:
        console.print("the ledger holds no creates yet")
    for r in receipts:
        table = Table(title=Text(f"receipt: {r['campaign']}"), show_header=False)
        table.add_column("what")
        table.add_column("figure", justify="right")
        for label, value in format_receipt(r):
            table.add_row(Text(label), Text(value))  # text, never markup
        console.print(table)
    return 0


def _cmd_ledger(args: argparse.Namespace) -> int:
    from .ledger.export import export_result, print_result

    remote = _remote_ledger(args.ledger)
    if remote is not None:  # a running controller holds the file: it answers
        result = remote.query_all(args.sql, args.limit)
        remote.close()
    else:
        with _open_ledger(args.ledger) as ledger:
            result = ledger.query(args.sql, limit=args.limit)
    if args.export:
        export_result(result, args.export)
        print(f"wrote {len(result.rows)} rows to {args.export}", file=sys.stderr)
    print_result(result, "json" if args.json else "csv" if args.csv else "table", args.limit)
    return 0


def _read_campaign(path: str) -> Campaign:
    """A campaign file, parsed; an unreadable or non-UTF-8 one is a ConfigError (a message, no
    traceback)."""
    from .core.campaign import parse_campaign

    return parse_campaign(_read_text(path, "campaign"), path)


def _cmd_run(args: argparse.Namespace) -> int:
    from .client import find_api_key
    from .core.policy import get_policy
    from .headless import run_headless
    from .ledger.store import default_ledger_path

    if args.background:  # the same headless run, in its own session; returns once it serves
        return _service_cmd("cmd_run_background", args)
    if not args.headless:
        print(
            "rentwatch: the dashboard run is `rentwatch watch --campaign FILE`; add --headless for no TUI",
            file=sys.stderr,
        )
        return 2
    if args.api_key:
        print(
            "rentwatch: warning: --api-key is visible in the process list; prefer VAST_API_KEY",
            file=sys.stderr,
        )
    campaign = _read_campaign(args.campaign)
    policy = get_policy(args.policy).with_overrides(campaign.policy)
    key = find_api_key(args.api_key)
    _check_ssh_key(args.ssh_key)
    asyncio.run(_check_market(args.market_url, key, args.http_timeout))
    from . import client as market_client

    market_client.DEFAULT_TIMEOUT = args.http_timeout  # every market call's total deadline
    if not args.no_api:
        from .service.controller import serve_headless

        run_headless = serve_headless  # type: ignore[assignment]  # the same run, served
    extra = {} if args.no_api else {"listen": args.listen}
    return asyncio.run(
        run_headless(
            campaign,
            policy,
            args.market_url,
            key,
            args.ledger or str(default_ledger_path()),
            detach=args.detach,
            key_path=args.ssh_key,
            **extra,
        )
    )


async def _check_market(url: str, key: str, timeout: float) -> None:
    """One authenticated read before anything is created or recorded: an unreachable market
    or a rejected key is one line and exit 2, not a trap and a traceback."""
    import httpx

    from .client import VastClient

    try:
        async with VastClient(url, key, timeout=timeout) as client:  # retries as the engine does
            await client.ssh_keys()
    except RentwatchError as exc:
        raise MarketCheckFailed(f"{url}: {exc}") from None
    except (httpx.HTTPError, ValueError) as exc:  # a URL httpx cannot use at all
        raise MarketCheckFailed(f"{url}: {type(exc).__name__}: {exc}") from None


def _check_ssh_key(path: str | None) -> None:
    """rentwatch's SSH key, loaded (or made) now: a path that cannot hold it is one line."""
    from pathlib import Path

    from .core.errors import ConfigError
    from .headless import default_key_path
    from .ssh_runner import load_or_create_key

    target = Path(path) if path else default_key_path()
    try:
        load_or_create_key(target)
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise ConfigError(f"cannot use the SSH key {target}: {why}") from None


class MarketCheckFailed(RentwatchError):
    title = "cannot use the market"


def _cmd_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .dashboard import run_demo

    return run_demo(
        time_scale=args.time_scale,
        ledger_path=Path(args.ledger) if args.ledger else None,
        seed=args.seed,
    )


def _cmd_watch(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .client import find_api_key
    from .core.policy import get_policy
    from .dashboard import run_dashboard
    from .ledger.store import default_ledger_path
    from .session import default_key_path

    campaign = _read_campaign(args.campaign) if args.campaign else None
    policy = get_policy(args.policy).with_overrides(campaign.policy if campaign else {})
    if args.background:  # the engine in its own process, this dashboard attached to it
        find_api_key(None)  # a missing key is one line here, not a controller that dies
        return _service_cmd("cmd_watch_background", args)
    return run_dashboard(
        args.market_url,
        find_api_key(None, flag=None),  # watch takes no --api-key: the key stays off `ps`
        campaign,
        policy,
        Path(args.ledger) if args.ledger else default_ledger_path(),
        default_key_path(),
    )


def _cmd_referee(args: argparse.Namespace) -> int:
    import json

    from .core.campaign import parse_campaign
    from .referee import format_table, referee, referee_campaign
    from .sim.scenario import load_scenario

    if args.scenario:
        _read_text(args.scenario, "scenario")
    scenario = None if args.family and not args.scenario else load_scenario(args.scenario)
    campaign = (
        parse_campaign(_read_text(args.campaign, "campaign"), args.campaign)
        if args.campaign
        else referee_campaign()
    )
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    from .referee import policy_from_spec

    for name in policies:
        policy_from_spec(name)
    result = referee(
        scenario,
        campaign,
        policies,
        args.seeds if args.seeds is not None else (1 if args.family else 3),
        warm=args.warm,
        time_scale=args.time_scale,
        family=args.family,
        family_seed=args.family_seed,
        deadline_min=args.deadline_min,
        workers=args.workers,
    )
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0


def _cmd_scenario(args: argparse.Namespace) -> int:
    from .scenario_fit import fit_scenario, to_toml

    with _open_ledger(args.ledger) as ledger:
        try:
            data = fit_scenario(ledger, args.campaign, args.seed)
        except ValueError as exc:
            print(f"rentwatch: {exc}", file=sys.stderr)
            return 1
    print(to_toml(data), end="")
    return 0


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {n}")
    return n


def _port(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, not {n}")
    return n


def _positive_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (x > 0 and x < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return x


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rentwatch", description=__doc__)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    d = sub.add_parser(
        "demo", help="the dashboard against a built-in simulated market (no account needed)"
    )
    d.add_argument(
        "--time-scale", type=_positive_float, default=30.0, help="sim seconds per wall second"
    )
    d.add_argument("--seed", type=int, default=7)
    d.add_argument(
        "--ledger", help="ledger file (default: demo-ledger.duckdb in the user's data dir)"
    )
    d.set_defaults(fn=_cmd_demo)

    w = sub.add_parser(
        "watch", help="the dashboard against the real marketplace (key from VAST_API_KEY)"
    )
    w.add_argument("--campaign", help="campaign TOML; without one, watch what the account runs")
    w.add_argument("--market-url", default="https://console.vast.ai")
    w.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    w.add_argument("--policy", default="default")
    w.add_argument(
        "--background",
        action="store_true",
        help="run the campaign in its own process; quitting may leave it running (attach later)",
    )
    w.add_argument("--http-timeout", type=_positive_float, default=20.0, help=argparse.SUPPRESS)
    w.set_defaults(fn=_cmd_watch)

    s = sub.add_parser("sim", help="run the simulated marketplace until killed")
    s.add_argument("--scenario", help="scenario TOML (default: the article's market)")
    s.add_argument("--port", type=_port, default=0, help="0: any free port")
    s.add_argument("--api-key", help="the account's API key (default: a random one, printed)")
    s.set_defaults(fn=_cmd_sim)

    h = sub.add_parser("run", help="run a campaign (headless: no TUI)")
    h.add_argument("--headless", action="store_true", help="no TUI: log lines to stdout")
    h.add_argument("--campaign", required=True, help="campaign TOML")
    h.add_argument("--market-url", default="https://console.vast.ai")
    h.add_argument("--api-key", help="prefer VAST_API_KEY: a flag shows in the process list")
    h.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    h.add_argument("--policy", default="default", help="naive, seed or default")
    h.add_argument(
        "--detach", action="store_true", help="leave instances running at the end (recorded)"
    )
    h.add_argument("--ssh-key", help="rentwatch's SSH key (default: in the user's data dir)")
    h.add_argument(
        "--http-timeout",
        type=_positive_float,
        default=20.0,
        help="seconds before a market call times out",
    )
    h.add_argument("--listen", metavar="tcp:HOST:PORT", help="also serve the API on TCP (token)")
    h.add_argument("--no-api", action="store_true", help="serve no controller API")
    h.add_argument(
        "--background",
        action="store_true",
        help="headless, in the background; log beside the ledger",
    )
    h.set_defaults(fn=_cmd_run)

    ls = sub.add_parser("ls", help="the running controllers")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=lambda a: _service_cmd("cmd_ls", a))
    at = sub.add_parser("attach", help="the dashboard of a running controller")
    at.add_argument("--socket", help="its Unix socket (default: the only one running)")
    at.add_argument("--campaign", help="the controller running this campaign")
    at.add_argument("--url", help="http://HOST:PORT of a controller started with --listen")
    at.add_argument("--token-file", help="the token file for --url")
    at.set_defaults(fn=lambda a: _service_cmd("cmd_attach", a))

    f = sub.add_parser(
        "referee", help="the same market under several policies, scored from the sim's truth"
    )
    f.add_argument("--scenario", help="scenario TOML (default: the article's market)")
    f.add_argument("--campaign", help="campaign TOML (default: a fleet of 3, as the demo)")
    f.add_argument(
        "--policies", default="naive,seed,default", help="names; NAME+SETTING=VALUE tries a setting"
    )
    f.add_argument(
        "--seeds", type=_positive_int, help="seeds per market (default 3; 1 with --family)"
    )
    f.add_argument("--family", type=int, default=0, help="N markets drawn from the family")
    f.add_argument("--family-seed", type=int, default=1, help="which family (docs/referee.md)")
    f.add_argument("--deadline-min", type=float, default=360.0, help="market minutes per run")
    f.add_argument("--workers", type=int, help="parallel processes (default: the CPU count)")
    f.add_argument(
        "--warm", action="store_true", help="run each policy twice on one ledger; score the second"
    )
    f.add_argument(
        "--time-scale",
        type=_positive_float,
        default=600.0,
        help="override the scenario's time scale",
    )
    f.add_argument("--json", action="store_true")
    f.set_defaults(fn=_cmd_referee)

    sc = sub.add_parser("scenario", help="scenario tools")
    sc_sub = sc.add_subparsers(dest="scenario_command", required=True)
    fl = sc_sub.add_parser(
        "from-ledger", help="fit a scenario file to a campaign's ledger (TOML on stdout)"
    )
    fl.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    fl.add_argument("--campaign", help="one campaign only")
    fl.add_argument("--seed", type=int, default=7)
    fl.set_defaults(fn=_cmd_scenario)

    r = sub.add_parser("receipt", help="the campaign receipt, computed from the ledger")
    r.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    r.add_argument("--campaign", help="one campaign only (JSON: one object)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(fn=_cmd_receipt)

    q = sub.add_parser("ledger", help="a read-only SQL query of the ledger")
    q.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    q.add_argument("sql", help='one SELECT, e.g. "select * from receipt"')
    fmt = q.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    q.add_argument("--limit", type=_positive_int, default=1000, help="row limit (default 1000)")
    q.add_argument(
        "--export", metavar="FILE", help="also write the result to FILE.csv or FILE.parquet"
    )
    q.set_defaults(fn=_cmd_ledger)

    from .reconcile import add_parser as add_reconcile

    add_reconcile(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # a usage error: argparse's one line and SystemExit(2)
    if not getattr(args, "fn", None):
        args = parser.parse_args(["watch"])  # plain `rentwatch` is `rentwatch watch`
    try:
        return int(args.fn(args) or 0)
    except RentwatchError as exc:
        # messages quote files, answers and host text: one clean line
        print(f"rentwatch: {clean(exc.title, 80)}: {clean(exc, 1000)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
