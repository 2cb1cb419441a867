"""What each `rentwatch` subcommand does: read the operator's files and flags, open what the command
needs, and hand over. Ordinary mistakes are `RentwatchError`s (one line, exit 2)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import RentwatchError


def _read_text(path: str, what: str) -> str:
    """A file the operator named, as text; any way it cannot be read is one ConfigError line."""
    from ..core.errors import ConfigError

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
    from ..core.campaign import Campaign


def cmd_sim(args: argparse.Namespace) -> int:
    from ..sim.scenario import load_scenario
    from ..sim.server import SimServer

    if args.scenario:
        _read_text(args.scenario, "scenario")  # unreadable or not UTF-8: one line, exit 2
    scenario = load_scenario(args.scenario)
    server = SimServer(scenario, port=args.port, api_key=args.api_key)

    async def main() -> None:
        # SIGTERM (a `kill`, a service manager) ends it as ^C does: its hosts' folders under
        # the temporary directory (sparse files of many GB) are removed on the way out. Caught
        # before anything is made or said (a SIGTERM just after the URL killed it, folders left)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGTERM, done.set)
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
            await done.wait()
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


def cmd_attach(args: argparse.Namespace) -> int:
    from ..run.service.spawn import run_dashboard
    from ..run.service.target import resolve

    return run_dashboard(resolve(args.socket, args.campaign, args.url, args.token_file, args.pid))


def cmd_receipt(args: argparse.Namespace) -> int:
    import json

    from ..ledger.receipt import print_receipts
    from .ledger_pick import ledger_for, reading

    # without --ledger: the user's ledger that knows the campaign (after `rentwatch demo`,
    # the demo's), or the only one with anything in it
    with reading(ledger_for(args.ledger, campaign=args.campaign)) as ledger:
        receipts = ledger.receipt(args.campaign)
    if args.campaign and not receipts:
        print(f"rentwatch: no campaign {args.campaign!r} in the ledger", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(receipts[0] if args.campaign else receipts, indent=2))
        return 0
    print_receipts(receipts)
    return 0


PIPED_WIDTH = 2000  # columns of `rentwatch ledger`'s table when stdout is not a terminal


def cmd_ls(args: argparse.Namespace) -> int:
    if args.team:  # the team's live controllers, from their heartbeats
        from .team import cmd_ls_team

        return cmd_ls_team(args)
    from .controllers import cmd_ls as ls

    return ls(args)


def cmd_ledger(args: argparse.Namespace) -> int:
    from ..ledger.export import export_result, print_result

    if args.team:  # the union of the team's events, from the store
        from .team import team_query

        result = team_query(args)
    else:
        from .ledger_pick import ledger_for, query

        # without --ledger: the one the user has
        result = query(ledger_for(args.ledger), args.sql, args.limit)
    if args.export:
        export_result(result, args.export)
        n = len(result.rows)
        print(f"wrote {n} row{'' if n == 1 else 's'} to {args.export}", file=sys.stderr)
    # piped, rich would squeeze the table into 80 columns (cells cut to "machi…"): a fixed
    # width that no table of the ledger's fills, so each column keeps its natural width
    width = None if sys.stdout.isatty() else PIPED_WIDTH
    print_result(result, "json" if args.json else "csv" if args.csv else "table", args.limit, width)
    return 0


def _read_campaign(
    path: str, upload_root: str | None = None, ssh_key: str | None = None
) -> Campaign:
    """A campaign file, parsed (else ConfigError), its uploads checked before anything is rented."""
    import dataclasses

    from ..core.errors import ConfigError
    from ..core.text import clean
    from ..engine.jobs.upload import check_uploads
    from ..engine.session import default_key_path
    from ..market.factory import load_campaign

    camp = load_campaign(_read_text(path, "campaign"), path)
    if not camp.upload:
        return camp
    # uploads are the operator's files beside the campaign: found from its folder, wherever
    # the controller runs (a `run --background` controller has a cwd of its own)
    here = Path(path).resolve().parent
    root = Path(upload_root) if upload_root else None
    keys = [default_key_path()] + ([Path(ssh_key)] if ssh_key else [])
    try:
        upload = check_uploads(camp.upload, here, root, keys)
    except ConfigError as exc:
        raise ConfigError(f"{clean(path, 300)}: {exc}") from None
    return dataclasses.replace(camp, upload=upload)


def usable_key(
    url: str, given: str | None, timeout: float | None, flag: str | None = "--api-key"
) -> str:
    """The market's API key (`given`, else VAST_API_KEY or the official CLI's file), tried with
    one read first: a market that cannot be used is one line, before anything is made for it."""
    from ..market.factory import find_api_key
    from ..market.reach import check_market

    key = find_api_key(given, flag=flag)
    asyncio.run(check_market(url, key, timeout))
    return key


def cmd_run(args: argparse.Namespace) -> int:
    from ..core.policy import get_policy
    from ..ledger.store import default_ledger_path
    from ..market.factory import DEFAULT_TIMEOUT
    from ..run.host import run_headless

    if args.background:  # the same headless run, in its own session; returns once it serves
        from .controllers import cmd_run_background

        return cmd_run_background(args)
    if args.api_key:
        print(
            "rentwatch: warning: --api-key is visible in the process list; prefer VAST_API_KEY",
            file=sys.stderr,
        )
    from .team import team_config

    campaign = _read_campaign(args.campaign, args.upload_root, args.ssh_key)
    policy = get_policy(args.policy).with_overrides(campaign.policy)
    team = team_config(args)  # before the market: a bad team setting is said first
    # every market call's total deadline: the flag, else the campaign's key, else the default
    timeout = args.http_timeout or campaign.http_timeout_s or DEFAULT_TIMEOUT
    key = usable_key(args.market_url, args.api_key, timeout)
    _check_ssh_key(args.ssh_key)
    return asyncio.run(
        run_headless(
            campaign,
            policy,
            args.market_url,
            key,
            args.ledger or str(default_ledger_path()),
            detach=args.detach,
            key_path=args.ssh_key,
            http_timeout_s=timeout,
            notify=args.notify,
            metrics_listen=args.metrics,
            team=team,
            served=not args.no_api,
            listen=args.listen,
        )
    )


def _check_ssh_key(path: str | None) -> None:
    """rentwatch's SSH key, loaded (or made) now: a path that cannot hold it is one line."""
    from ..core.errors import ConfigError
    from ..engine.hosts.ssh import load_or_create_key
    from ..engine.session import default_key_path

    target = Path(path) if path else default_key_path()
    try:
        load_or_create_key(target)
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise ConfigError(f"cannot use the SSH key {target}: {why}") from None


def cmd_demo(args: argparse.Namespace) -> int:
    from platformdirs import user_data_dir

    from .team import team_argv, team_config

    team = team_config(args)
    ledger = Path(args.ledger or Path(user_data_dir("rentwatch")) / "demo-ledger.duckdb")
    if args.foreground:  # the engine and the simulated market inside this process
        from ..run.dashboard import run_demo

        return run_demo(args.time_scale, ledger, args.seed, team)
    from ..run.service.spawn import run_attached

    argv = ["--demo", "--time-scale", str(args.time_scale), "--seed", str(args.seed)]
    argv += team_argv(team)
    return run_attached(argv, ledger.resolve(), None)  # a demo already running: attach to it


def cmd_watch(args: argparse.Namespace) -> int:
    import os

    from ..core.policy import get_policy
    from ..engine.session import default_key_path
    from ..ledger.store import default_ledger_path
    from .flags import engine_argv
    from .team import team_config

    campaign = _read_campaign(args.campaign, args.upload_root) if args.campaign else None
    policy = get_policy(args.policy).with_overrides(campaign.policy if campaign else {})
    team = team_config(args)
    if args.metrics:  # said here, not by a controller's log or under a dashboard's screen
        from ..notify.metrics import parse_listen

        parse_listen(args.metrics)
    ledger = Path(args.ledger).resolve() if args.ledger else default_ledger_path()
    # watch takes no --api-key (the key stays off `ps`); the market is tried before the
    # controller, its log, its ledger and its SSH key
    key = usable_key(args.market_url, None, campaign.http_timeout_s if campaign else None, None)
    if args.foreground:  # the engine inside this process: it ends with the dashboard
        from ..run.dashboard import run_dashboard

        return run_dashboard(
            args.market_url,
            key,
            campaign,
            policy,
            ledger,
            default_key_path(),
            team,
            notify=args.notify,
            metrics_listen=args.metrics,
        )
    from ..run.service.spawn import run_attached

    argv = engine_argv(args)
    env = dict(os.environ, VAST_API_KEY=key)  # through the environment, never argv
    return run_attached(argv, ledger, campaign.name if campaign else "watch", env)


def cmd_referee(args: argparse.Namespace) -> int:
    import json

    from ..market.factory import load_campaign
    from ..referee.campaigns import referee_campaign
    from ..referee.run import referee
    from ..referee.table import format_table
    from ..sim.scenario import load_scenario

    if args.scenario:
        _read_text(args.scenario, "scenario")
    scenario = None if args.family and not args.scenario else load_scenario(args.scenario)
    campaign = (
        load_campaign(_read_text(args.campaign, "campaign"), args.campaign)
        if args.campaign
        else referee_campaign()
    )
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    result = referee(
        scenario,
        campaign,
        policies,
        args.seeds if args.seeds is not None else (1 if args.family else 3),
        warm=args.warm,
        family=args.family,
        family_seed=args.family_seed,
        deadline_min=args.deadline_min,
        workers=args.workers,
        keep_logs=args.keep_logs,
        max_pace=args.time_scale,
        lag_bound_s=args.max_lag_s,
    )
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0


def cmd_scenario(args: argparse.Namespace) -> int:
    from contextlib import AbstractContextManager

    from ..ledger import Ledger
    from ..ledger.snapshot import snapshot
    from ..ledger.store import HELD_ELSEWHERE, LedgerError, default_ledger_path
    from ..referee.fit import fit_scenario, to_toml

    path = Path(args.ledger) if args.ledger else default_ledger_path()
    opened: AbstractContextManager[Ledger]
    try:
        opened = Ledger(path, read_only=True)
    except LedgerError as exc:
        if HELD_ELSEWHERE not in str(exc):
            raise
        # a running controller writes it: the fit reads a copy of it as it stands now
        print(f"rentwatch: {path} {HELD_ELSEWHERE}: fitted from a copy taken now", file=sys.stderr)
        opened = snapshot(path)
    with opened as ledger:
        try:
            data = fit_scenario(ledger, args.campaign, args.seed)
        except ValueError as exc:
            print(f"rentwatch: {exc}", file=sys.stderr)
            return 1
    print(to_toml(data), end="")
    return 0


def cmd_scenario_describe(args: argparse.Namespace) -> int:
    import json

    from ..sim.describe import describe_family, format_description

    d = describe_family(args.family_seed, args.family)
    print(json.dumps(d, indent=1) if args.json else format_description(d, args.family_seed))
    return 0
