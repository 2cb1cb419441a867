"""`rentwatch ssh ID`: an interactive SSH session to an instance the ledger holds, by the route the
engine last reached it by, with rentwatch's own key, through the system `ssh`.

The proxy's host and port are reused by other instances, so known hosts are kept per instance
(`HostKeyAlias=rentwatch-ID`) in rentwatch's own file: a changed key is refused by ssh itself."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from ..core.errors import RentwatchError
from ..core.text import clean
from ..ledger.job_reads import ssh_route
from .ledger_pick import select


class NoRoute(RentwatchError):
    title = "no way in"


def route_of(ledger: str | Path, instance_id: int) -> tuple[str, str, int, str]:
    """(kind, host, port, campaign) of the route that last worked into `instance_id`; NoRoute
    says why there is none (not in the ledger, destroyed, stopped, never reached)."""
    rows = select(ledger, ssh_route(instance_id), 2)
    if not rows:
        raise NoRoute(f"instance {instance_id} is not in the ledger {ledger}")
    r = rows[0]
    if r["destroyed_at"] is not None or r["last_change"] == "destroy":
        raise NoRoute(f"instance {instance_id} ({r['campaign']}) was destroyed")
    if r["last_change"] == "stop":
        raise NoRoute(
            f"instance {instance_id} ({r['campaign']}) is stopped: start it first "
            "(`a` in the dashboard), then wait for it to run"
        )
    where = r["route_where"]
    if not where or ":" not in str(where):
        raise NoRoute(
            f"instance {instance_id} ({r['campaign']}) has not been reached over SSH yet: "
            "wait for its preflight"
        )
    host, _, port = str(where).rpartition(":")
    if not port.isdigit() or not host:
        raise NoRoute(f"instance {instance_id}: the ledger's route {where!r} is unreadable")
    return str(r["route_kind"] or "?"), host.strip("[]"), int(port), str(r["campaign"])


def ssh_command(
    instance_id: int, host: str, port: int, key: Path, known_hosts: Path, remote: list[str]
) -> list[str]:
    """The system ssh's command line into one instance, with rentwatch's key only."""
    cmd = ["ssh", "-i", str(key), "-p", str(port)]
    cmd += ["-o", "IdentitiesOnly=yes", "-o", f"HostKeyAlias=rentwatch-{int(instance_id)}"]
    cmd += ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=accept-new"]
    if not remote:
        cmd.append("-t")  # a terminal for the shell, even when run by a script
    cmd.append(f"root@{host}")
    return cmd + remote  # after the destination, ssh reads the rest as the command


def ssh_exe() -> str:
    exe = shutil.which("ssh")
    if exe is None:
        raise NoRoute("no `ssh` command on PATH (install OpenSSH's client)")
    return exe


def _instance_id(text: str) -> int:
    raw = text.strip().removeprefix("i:")
    if not raw.isdigit() or not 0 < int(raw) < 2**53:
        raise argparse.ArgumentTypeError(f"expected an instance id, got {text!r}")
    return int(raw)


def run(args: argparse.Namespace) -> int:
    from ..engine.session import default_key_path
    from .ledger_pick import ledger_for

    ledger = ledger_for(args.ledger, instance=args.id)  # the user's ledger that holds it
    if not ledger.exists():
        raise NoRoute(f"no ledger at {ledger} (--ledger PATH names the campaign's)")
    kind, host, port, campaign = route_of(ledger, args.id)
    key = Path(args.ssh_key) if args.ssh_key else default_key_path()
    if not key.exists():
        raise NoRoute(f"rentwatch's SSH key {key} does not exist (--ssh-key names another)")
    remote = [args.command] if args.command else []
    cmd = ssh_command(args.id, host, port, key, key.parent / "known_hosts", remote)
    if args.print:
        print(shlex.join(cmd))
        return 0
    exe = ssh_exe()
    route = clean(f"{host}:{port}")  # the market's words
    print(f"rentwatch: i:{args.id} ({campaign}) by its {kind} route {route}", file=sys.stderr)
    sys.stdout.flush()
    os.execv(exe, cmd)  # the session is ssh's own from here: its exit status is ours
    return 0  # not reached


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "ssh", help="an SSH session to a held instance, by the route that works, with our key"
    )
    p.add_argument("id", type=_instance_id, metavar="ID", help="the instance id")
    p.add_argument(
        "--ledger", help="the campaign's ledger (default: the user's ledger that holds ID)"
    )
    p.add_argument("--ssh-key", help="rentwatch's SSH key (default: in the user's data dir)")
    p.add_argument("--print", action="store_true", help="print the ssh command, run nothing")
    p.add_argument(
        "-c", "--command", metavar="CMD", help="run CMD on the host (one string), not a shell"
    )
    p.set_defaults(fn=run)
