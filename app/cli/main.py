"""The `rentwatch` command line: one subcommand per task (each lists its own options with
`rentwatch COMMAND --help`); plain `rentwatch` is `rentwatch watch`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..core.errors import RentwatchError
from ..core.text import clean
from . import commands
from .flags import add_alert_flags, add_market_flag, add_policy_flag, add_upload_root_flag
from .team import add_team_flags


def _checked(
    cast: Callable[[str], Any], noun: str, fits: Callable[[Any], bool], bounds: str
) -> Callable[[str], Any]:
    """An argparse type: `cast` must read the text, and `fits` take the value."""

    def parse(text: str) -> Any:
        try:
            n = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        if not fits(n):
            raise argparse.ArgumentTypeError(bounds.format(n))
        return n

    return parse


_positive_int = _checked(int, "a whole number", lambda n: n >= 1, "expected 1 or more, got {}")
_port = _checked(int, "a port number", lambda n: 0 <= n <= 65535, "a port is 0-65535, not {}")
_positive_float = _checked(
    float, "a number", lambda x: 0 < x < float("inf"), "expected a positive number, got {}"
)


FOREGROUND = (
    "the engine inside the dashboard's process, ending with it (debugging); by default it runs "
    "as a controller of its own that quitting may leave running"
)


class _Parser(argparse.ArgumentParser):
    """Each (sub)command's parser names itself in the namespace, so a flag it does not know is
    reported with its own usage line, not the top level's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(usage_parser=self)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rentwatch", description=__doc__)
    p.add_argument("--version", action="version", version=f"rentwatch {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    d = sub.add_parser(
        "demo", help="the dashboard against a built-in simulated market (no account needed)"
    )
    d.add_argument(
        "--time-scale",
        type=_positive_float,
        default=30.0,
        help="market seconds per wall second (default: %(default)s)",
    )
    d.add_argument(
        "--seed",
        type=int,
        default=7,
        help="the simulated market's seed: the same seed draws the same offers and hosts "
        "(default: %(default)s)",
    )
    d.add_argument(
        "--ledger", help="ledger file (default: demo-ledger.duckdb in the user's data dir)"
    )
    d.add_argument("--foreground", action="store_true", help=FOREGROUND)
    add_team_flags(d)
    d.set_defaults(fn=commands.cmd_demo)

    w = sub.add_parser(
        "watch", help="the dashboard against the real marketplace (key from VAST_API_KEY)"
    )
    w.add_argument("--campaign", help="campaign TOML; without one, watch what the account runs")
    add_market_flag(w)
    w.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    add_policy_flag(w)
    w.add_argument("--foreground", action="store_true", help=FOREGROUND)
    add_alert_flags(w)
    add_upload_root_flag(w)
    add_team_flags(w)
    w.set_defaults(fn=commands.cmd_watch)

    s = sub.add_parser("sim", help="run the simulated marketplace until killed")
    s.add_argument("--scenario", help="scenario TOML (default: the article's market)")
    s.add_argument("--port", type=_port, default=0, help="0: any free port")
    s.add_argument("--api-key", help="the account's API key (default: a random one, printed)")
    s.set_defaults(fn=commands.cmd_sim)

    h = sub.add_parser("run", help="run a campaign without the TUI: log lines to stdout")
    h.add_argument("--headless", action="store_true", help="what `run` always is (no TUI)")
    h.add_argument("--campaign", required=True, help="campaign TOML")
    add_market_flag(h, api_key=True)
    h.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    add_policy_flag(h)
    h.add_argument(
        "--detach", action="store_true", help="leave instances running at the end (recorded)"
    )
    h.add_argument("--ssh-key", help="rentwatch's SSH key (default: in the user's data dir)")
    h.add_argument(
        "--http-timeout",
        type=_positive_float,
        help="seconds before a market call times out (default: the campaign's http_timeout_s, "
        "else 20)",
    )
    h.add_argument("--listen", metavar="tcp:HOST:PORT", help="also serve the API on TCP (token)")
    h.add_argument("--no-api", action="store_true", help="serve no controller API")
    add_alert_flags(h)
    add_upload_root_flag(h)
    add_team_flags(h)
    h.add_argument(
        "--background",
        action="store_true",
        help="in the background; log beside the ledger",
    )
    h.set_defaults(fn=commands.cmd_run)

    ls = sub.add_parser("ls", help="the running controllers")
    ls.add_argument(
        "--json",
        action="store_true",
        help="a JSON list, one object per controller (campaign, pid, socket, ledger, ...) "
        "instead of the table (default: the table)",
    )
    add_team_flags(ls, reader=True)
    ls.set_defaults(fn=commands.cmd_ls)
    at = sub.add_parser("attach", help="the dashboard of a running controller")
    at.add_argument("--socket", help="its Unix socket (default: the only one running)")
    at.add_argument("--campaign", help="the controller running this campaign")
    at.add_argument("--pid", type=int, help="the controller with this pid (`rentwatch ls`)")
    at.add_argument("--url", help="http://HOST:PORT of a controller started with --listen")
    at.add_argument("--token-file", help="the token file for --url")
    at.set_defaults(fn=commands.cmd_attach)

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
    f.add_argument(
        "--family", type=_positive_int, default=0, help="N markets drawn from the family"
    )
    f.add_argument("--family-seed", type=int, default=1, help="which family (docs/referee.md)")
    f.add_argument("--deadline-min", type=float, default=360.0, help="market minutes per run")
    f.add_argument("--workers", type=int, help="parallel processes (default: the CPU count)")
    f.add_argument(
        "--warm",
        action="store_true",
        help="run an earlier campaign (renamed, same jobs' shapes) on the same market and "
        "ledger first; score the campaign under test",
    )
    f.add_argument(
        "--max-lag-s",
        type=_positive_float,
        default=120.0,
        help="market seconds a run's lag may reach before the run is marked invalid",
    )
    f.add_argument(
        "--time-scale",
        type=_positive_float,
        help="the most market seconds a run passes per wall second, to watch one go (default: "
        "as fast as the box allows; the scores do not depend on it)",
    )
    f.add_argument("--json", action="store_true")
    f.add_argument(
        "--keep-logs",
        metavar="DIR",
        help="keep each run's log, ledger, jobs and the sim's truth in DIR/mMM-POLICY-sSEED/",
    )
    f.set_defaults(fn=commands.cmd_referee)

    sc = sub.add_parser("scenario", help="scenario tools")
    sc_sub = sc.add_subparsers(dest="scenario_command", required=True)
    fl = sc_sub.add_parser(
        "from-ledger", help="fit a scenario file to a campaign's ledger (TOML on stdout)"
    )
    fl.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    fl.add_argument("--campaign", help="one campaign only")
    fl.add_argument("--seed", type=int, default=7)
    fl.set_defaults(fn=commands.cmd_scenario)
    de = sc_sub.add_parser(
        "describe", help="what a market family drew, against the public evidence (docs/referee.md)"
    )
    de.add_argument("--family", type=_positive_int, required=True, help="N markets of the family")
    de.add_argument("--family-seed", type=int, default=1, help="which family")
    de.add_argument("--json", action="store_true")
    de.set_defaults(fn=commands.cmd_scenario_describe)

    r = sub.add_parser("receipt", help="the campaign receipt, computed from the ledger")
    r.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    r.add_argument("--campaign", help="one campaign only (JSON: one object)")
    r.add_argument("--json", action="store_true", help="the receipt as JSON")
    r.set_defaults(fn=commands.cmd_receipt)

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
    add_team_flags(q, reader=True)
    q.set_defaults(fn=commands.cmd_ledger)

    from .controller import add_parser as add_controller
    from .end import add_parser as add_end
    from .jobs import add_parser as add_jobs
    from .offers import add_parser as add_offers
    from .reconcile import add_parser as add_reconcile
    from .ssh import add_parser as add_ssh
    from .team import add_parser as add_team

    add_controller(sub, positive=_positive_float)

    add_reconcile(sub)
    add_offers(sub, positive_int=_positive_int)
    add_ssh(sub)
    add_jobs(sub)
    add_end(sub)
    add_team(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # a usage error: argparse's one line and SystemExit(2)
    args, extra = parser.parse_known_args(argv)
    if extra:
        getattr(args, "usage_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "fn", None):
        args = parser.parse_args(["watch"])  # plain `rentwatch` is `rentwatch watch`
    try:
        return int(args.fn(args) or 0)
    except RentwatchError as exc:
        # messages quote files, answers and host text: one clean line
        head = "" if getattr(exc, "whole_line", False) else f"{clean(exc.title, 80)}: "
        problems = getattr(exc, "problems", ())
        if len(problems) > 1:  # a file's problems, all of them: one line each, as a compiler
            print(f"rentwatch: {head}{len(problems)} problems", file=sys.stderr)
            for problem in problems:
                print(f"  {clean(problem, 1000)}", file=sys.stderr)
            return 2
        print(f"rentwatch: {head}{clean(exc, 1000)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`| head`, `| grep -q`): nothing more to say, and no traceback;
        # stdout goes to /dev/null so the interpreter's own flush at exit does not raise again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell tool that died of it


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
