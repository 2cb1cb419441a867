"""The team store on the command line: the team flags on the commands that run an engine, and the
commands that read the store (`team init`, `ledger --team`, `ls --team`, `reconcile --team`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..ledger.team.config import TeamConfig, TeamConfigError, resolve, team_section

TEAM_HELP = (
    "a PostgreSQL URL of the team store, without its password (PGPASSWORD, ~/.pgpass or "
    "--team-password-file); default: [team] url in the user's config file"
)


def add_team_flags(p: argparse.ArgumentParser, reader: bool = False) -> None:
    """The team flags. On a command that reads the store (`reader`), `--team` takes no value (a
    query follows it): the URL is `--team-url URL` or the config file's; no `--operator`."""
    if reader:
        p.add_argument("--team", action="store_true", help="read the team store, not this ledger")
        p.add_argument("--team-url", metavar="URL", help=TEAM_HELP)
    else:
        p.add_argument("--team", metavar="URL", help=TEAM_HELP)
        p.add_argument(
            "--operator",
            metavar="NAME",
            help="this operator's name in the team (default: user name)",
        )
    p.add_argument(
        "--team-password-file",
        metavar="PATH",
        help="a file (mode 0600) whose first line is the store's password",
    )


def team_config(args: argparse.Namespace, required: bool = False) -> TeamConfig | None:
    """The team this command joins or reads (None: none named, and none required)."""
    from ..notify.notifier import read_user_config, user_config_path

    url = getattr(args, "team_url", None) or getattr(args, "team", None)
    wanted = bool(url)  # `--team` given (a reader's bare flag is True)
    url = url if isinstance(url, str) else None
    path = user_config_path()
    conf = resolve(
        url or None,
        getattr(args, "operator", None),
        getattr(args, "team_password_file", None),
        team_section(read_user_config(path) or {}, path),
    )
    if conf is None and (wanted or required):
        flag = "--team-url URL" if hasattr(args, "team_url") else "--team URL"
        raise TeamConfigError(f"no team store: give {flag} or set [team] url in {path}")
    return conf


def team_argv(conf: TeamConfig | None) -> list[str]:
    """The flags that hand the same team to a controller this command starts (the password
    travels in the environment or stays in its file)."""
    if conf is None:
        return []
    argv = ["--team", conf.url, "--operator", conf.operator]
    if conf.password_file is not None:
        argv += ["--team-password-file", str(conf.password_file.resolve())]
    return argv


# -- the commands --------------------------------------------------------------------------
def cmd_team_init(args: argparse.Namespace) -> int:
    from ..ledger.team.config import parse_url
    from ..ledger.team.migrations import CONTROLLER_ROLE, SCHEMA_VERSION
    from ..ledger.team.store import TeamStore

    conf = TeamConfig(parse_url(args.url), "owner", _pw(args))
    store = TeamStore(conf)
    try:
        applied = store.init(grant=args.grant)
    finally:
        store.close()
    done = f"applied {', '.join(map(str, applied))}" if applied else "nothing to apply"
    print(
        f"team store at schema {SCHEMA_VERSION} ({done}); role {CONTROLLER_ROLE} may INSERT "
        "and SELECT, never UPDATE or DELETE"
    )
    for user in args.grant:
        print(f"granted {CONTROLLER_ROLE} to {user}")
    return 0


def _pw(args: argparse.Namespace) -> Path | None:
    from ..ledger.team.config import read_password_file

    path = getattr(args, "team_password_file", None)
    if not path:
        return None
    p = Path(path).expanduser()
    read_password_file(p)
    return p


def _store(args: argparse.Namespace) -> Any:
    from ..ledger.team.store import TeamStore

    conf = team_config(args, required=True)
    assert conf is not None
    store = TeamStore(conf)
    store.check_schema()
    return store


def cmd_ls_team(args: argparse.Namespace) -> int:
    store = _store(args)
    try:
        live = store.live_controllers()
    finally:
        store.close()
    if args.json:
        print(json.dumps([c.as_json() for c in live], indent=1))
        return 0
    if not live:
        print("no controller of the team is live")
        return 0
    from rich.table import Table
    from rich.text import Text

    from ..core.text import clean
    from .tables import print_table

    table = Table("operator", "campaign", "host", "pid", "seen")
    for c in live:  # any controller role wrote these: text, never markup, never escapes
        table.add_row(
            Text(clean(c.operator, 64)),
            Text(clean(c.campaign or "", 100)),
            Text(clean(c.host, 100)),
            str(c.pid),
            f"{c.age_s:.0f}s ago",
        )
    print_table(table)
    return 0


def team_query(args: argparse.Namespace) -> Any:
    """`rentwatch ledger --team "SQL"`: the store's events (every operator's) pulled into a
    DuckDB of this process, and the query run over their union with the ledger's views."""
    from ..ledger import Ledger

    store = _store(args)
    with Ledger(":memory:") as db:
        replica = db.replica()
        replica.join("", None, every_market=True)
        try:
            for ledger_id, operator in store.ledgers():
                for rows in store.pull_all(ledger_id, 0, 20_000):
                    replica.add(ledger_id, operator, rows)
        finally:
            store.close()
        return db.query(args.sql, limit=args.limit, team=True)


def cmd_reconcile_team(args: argparse.Namespace) -> int:
    """Every operator's hash chain checked, each bad event named. Exit 1 when anything is wrong."""
    store = _store(args)
    extra: dict[str, Any] = {}
    try:
        ledgers, events, findings = store.check_chains()
        if args.ledger:  # and one ledger's own events against the store's copy
            more, extra = _against_ledger(store, Path(args.ledger))
            findings += more
    finally:
        store.close()
    if args.json:
        report = {"ledgers": ledgers, "events": events, "findings": [f.as_json() for f in findings]}
        print(json.dumps({**report, **extra}, indent=2))
    else:
        from ..core.text import clean

        print(f"team store: {ledgers} ledger(s), {events} event(s): {len(findings)} finding(s)")
        if extra:
            print(
                f"ledger {args.ledger}: {extra['ledger_events']} event(s), "
                f"{extra['unshipped']} not shipped yet"
            )
        for f in findings:
            print(
                f"  {clean(f.operator, 64)} ledger {f.ledger_id[:8]} event {f.seq}: "
                f"{f.problem}: {clean(f.detail, 300)}"
            )
    return 1 if findings else 0


def _against_ledger(store: Any, path: Path) -> tuple[list[Any], dict[str, Any]]:
    """The ledger at `path` against the store's copy of its events (its chain recomputed)."""
    from ..ledger import Ledger
    from ..ledger.team.chain import compare

    with Ledger(path, read_only=True) as ledger:
        meta = dict(ledger.query("SELECT key, value FROM meta").rows)
        local = ledger.raw_events(0, 1 << 62)
    ledger_id, operator = meta.get("ledger_id"), meta.get("team_operator")
    if not ledger_id or operator is None:
        raise TeamConfigError(f"{path} never joined a team: nothing of it is in the store")
    findings, unshipped = compare(ledger_id, operator, local, store.hashes(ledger_id))
    return findings, {"ledger_events": len(local), "unshipped": unshipped}


def add_parser(sub: Any) -> None:
    t = sub.add_parser("team", help="the team store (PostgreSQL) a team's controllers share")
    t_sub = t.add_subparsers(dest="team_command", required=True)
    i = t_sub.add_parser(
        "init", help="make or migrate the store and its controller role (run as its owner)"
    )
    i.add_argument("url", help="the store's PostgreSQL URL, without its password")
    i.add_argument(
        "--grant",
        action="append",
        default=[],
        metavar="ROLE",
        help="grant the controller role to this login role (repeatable)",
    )
    i.add_argument("--team-password-file", metavar="PATH", help="the owner's password file (0600)")
    i.set_defaults(fn=cmd_team_init)
