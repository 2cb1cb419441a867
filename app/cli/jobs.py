"""`rentwatch jobs`: a campaign's jobs, as `sky queue` lists them; `rentwatch logs JOB [-f]`: one
job's output, as `sky logs` prints it. Live from the controller when one runs the campaign, else
from the ledger and the host or the output kept here. Host text is cleaned first."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from itertools import groupby
from pathlib import Path
from typing import Any

from ..core.errors import RentwatchError
from ..core.text import clean
from ..ledger import job_reads
from ..views.jobs import JobRow, cells, fold, names_of, rows_from_ledger
from .ledger_pick import select

FOLLOW_S = 2.0  # wall seconds between two looks while following through a controller
LOG_BYTES = 64 * 1024


class NoJob(RentwatchError):
    title = "no such job"


def _controller(ledger: Path, campaign: str | None) -> tuple[Any, str] | None:
    """The controller holding `ledger` and its campaign, when it runs `campaign` (any, if None)."""
    from .controllers import controller_for_ledger

    remote = controller_for_ledger(ledger)
    if remote is None:
        return None
    running = str(remote.status().get("campaign") or "")
    if campaign is not None and campaign != running:
        remote.close()
        return None
    return remote, running


def ledger_rows(ledger: Path, campaign: str | None) -> list[tuple[str, JobRow]]:
    """(campaign, row) for each job the ledger knows, from its events alone."""
    events = select(ledger, job_reads.job_events(campaign))
    starts = {
        r["campaign"]: names_of(r["jobs"])
        for r in select(ledger, job_reads.campaign_jobs(campaign))
    }
    ids = {int(e["instance_id"]) for e in events if e["instance_id"] is not None}
    spans = select(ledger, job_reads.billing_spans(ids)) if ids else []  # by instance, then ts
    billed = {i: list(g) for i, g in groupby(spans, key=lambda b: int(b["instance_id"]))}
    hosts = {int(h["instance_id"]): h for h in select(ledger, job_reads.hosts(ids))} if ids else {}
    clocks = {
        r["campaign"]: float(r["now"])
        for r in select(ledger, "SELECT campaign, now FROM campaign_clocks")
    }
    out = []
    for name in sorted({*starts, *(e["campaign"] for e in events)} - {None}):
        mine = [e for e in events if e["campaign"] == name]
        folded = fold(mine, starts.get(name, ()))
        now = clocks.get(name, 0.0)
        out += [(name, r) for r in rows_from_ledger(folded, billed, hosts, now)]
    return out


def print_table(rows: list[tuple[str, JobRow]]) -> None:
    """One table per campaign: `rows` come campaign by campaign."""
    head = ("JOB", "STATE", "HOST", "PROGRESS", "ETA", "USD", "TRIES")
    for campaign, mine in groupby(rows, key=lambda cr: cr[0]):
        table = [head, *(cells(r) for _, r in mine)]
        widths = [max(len(c[i]) for c in table) for i in range(len(head))]
        print(f"campaign {clean(campaign, 64)}")
        for c in table:
            print("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip())


def cmd_jobs(args: argparse.Namespace) -> int:
    from .ledger_pick import ledger_for

    ledger = ledger_for(args.ledger, campaign=args.campaign)
    found = _controller(ledger, args.campaign)
    if found is not None:
        remote, running = found
        with remote:
            rows = [(running, r) for r in remote.jobs()]
    else:
        rows = ledger_rows(ledger, args.campaign)
    if args.campaign is not None and not rows:
        raise NoJob(f"the ledger {ledger} has no jobs of campaign {args.campaign!r}")
    if args.json:
        print(json.dumps([{"campaign": c, **asdict(r)} for c, r in rows], indent=1))
    elif not rows:
        print(f"no jobs in the ledger {ledger}")
    else:
        print_table(rows)
    return 0


# -- logs ----------------------------------------------------------------------------------
def _new_part(before: str, now: str) -> str:
    """What `now` (a tail of a growing log) adds after `before` (the last tail read)."""
    if not before:
        return now
    if now.startswith(before):
        return now[len(before) :]
    for cut in range(min(len(before), len(now)), 0, -1):  # the tail window moved on
        if before.endswith(now[:cut]):
            return now[cut:]
    return now


def _emit(text: str) -> None:
    """A host's output as lines a terminal may show: each cleaned (no escapes, no controls);
    a carriage return (a progress bar redrawn) starts a line, as it would on the screen."""
    for line in text.splitlines():
        print(clean(line, 2000))


def follow_controller(
    remote: Any,
    job: str,
    follow: bool,
    campaign: str = "",
    others: Callable[[], list[str]] = list,
) -> int:
    """The job's output through the controller, whose campaign is `campaign`; with `follow`,
    more until it leaves its host. `others`: the ledger's other campaigns with a job of that
    name, named on stderr with how to pick one (as `kubectl logs` names the container it
    chose), asked once the controller has the job."""
    got = remote.job_log(job)
    of = f" of campaign {clean(campaign, 64)}" if campaign else ""
    print(f"rentwatch: job {job}{of}: {clean(got.source, 200)}", file=sys.stderr)
    also = others()
    if also:
        names = ", ".join(clean(c, 64) for c in also)
        print(
            f"rentwatch: {len(also)} other campaign(s) have a job {job}: {names}; this is the "
            f"running controller's, --campaign NAME shows another",
            file=sys.stderr,
        )
    _emit(got.text)
    seen = got.text
    while follow and got.live:
        time.sleep(FOLLOW_S)
        got = remote.job_log(job)
        _emit(_new_part(seen, got.text))
        seen = got.text or seen
    return 0


def _where(ledger: Path, campaign: str | None, job: str) -> tuple[str, JobRow]:
    rows = [(c, r) for c, r in ledger_rows(ledger, campaign) if r.job == job]
    if not rows:
        which = f"campaign {campaign!r}" if campaign else "any campaign"
        raise NoJob(f"no job {job!r} in {which} of the ledger {ledger}")
    if len({c for c, _ in rows}) > 1:
        names = ", ".join(sorted({c for c, _ in rows}))
        raise NoJob(
            f"job {job!r} is in several campaigns ({names}) and no controller runs one of "
            "them: name one with --campaign"
        )
    return rows[0]


def over_ssh(ledger: Path, campaign: str, row: JobRow, follow: bool, key: Path) -> int:
    """The job's log over the system ssh, by the engine's last route, cleaned line by line."""
    from ..engine.jobs.runner import job_dir
    from .ssh import route_of, ssh_command, ssh_exe

    assert row.instance_id is not None
    kind, host, port, _ = route_of(ledger, row.instance_id)
    log = f"{job_dir(row.job)}/log"
    remote = f"tail -c {LOG_BYTES} {'-f ' if follow else ''}{log}"
    cmd = ssh_command(row.instance_id, host, port, key, key.parent / "known_hosts", [remote])
    cmd.insert(1, "-T")  # no terminal: the host's bytes come to us, not to the screen
    exe = ssh_exe()
    print(
        f"rentwatch: job {row.job} of campaign {clean(campaign, 64)} on i:{row.instance_id} "
        f"by its {kind} route {host}:{port}",
        file=sys.stderr,
    )
    with subprocess.Popen([exe, *cmd[1:]], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL) as p:
        assert p.stdout is not None
        try:
            for raw in iter(p.stdout.readline, b""):
                for line in raw.replace(b"\r", b"\n").splitlines():  # \r: a bar redrawn
                    print(clean(line.decode("utf-8", errors="replace"), 2000))
        except KeyboardInterrupt:
            p.terminate()
            return 130
        return p.wait()


def kept_output(ledger: Path, campaign: str, row: JobRow) -> tuple[str, str]:
    """(text, where from) of an ended job: its kept output, else its end's tail in the ledger.
    Only this ledger's note says where a log was kept: the artifacts folder is the campaign
    name's, and another ledger's run of that name may have filled it."""
    from ..engine.jobs.output import read_kept

    if row.attempts == 0:
        return "", "not started yet: no output"
    got = select(ledger, job_reads.pulled_log(campaign, row.job))
    path = got[0]["path"] if got else None
    text = read_kept(Path(path), LOG_BYTES) if path else None
    if text is not None:
        return text, f"its output kept at {path}"
    tail = [
        str(e["log_tail"])
        for e in select(ledger, job_reads.job_events(campaign, row.job))
        if e["log_tail"]
    ]
    if tail:
        return tail[-1], "the tail its end left in the ledger (its full output was not kept)"
    return "", "no output recorded"


def cmd_logs(args: argparse.Namespace) -> int:
    from ..engine.session import default_key_path
    from .ledger_pick import ledger_for

    ledger = ledger_for(args.ledger, campaign=args.campaign)
    found = _controller(ledger, args.campaign)
    if found is not None:
        from ..run.service.api import ServiceError

        remote, running = found

        def others() -> list[str]:
            if args.campaign is not None:  # the one asked for: nothing was chosen for them
                return []
            rows = ledger_rows(ledger, None)
            return sorted({c for c, r in rows if r.job == args.job and c != running})

        try:
            return follow_controller(remote, args.job, args.follow, running, others)
        except ServiceError as exc:
            if "has no job" not in str(exc):
                raise
            # not the running campaign's: an earlier campaign's job, from the ledger
        finally:
            remote.close()
    campaign, row = _where(ledger, args.campaign, args.job)
    if row.state == "running" and row.instance_id is not None:
        key = Path(args.ssh_key) if args.ssh_key else default_key_path()
        return over_ssh(ledger, campaign, row, args.follow, key)
    text, source = kept_output(ledger, campaign, row)
    print(
        f"rentwatch: job {row.job} of campaign {clean(campaign, 64)} ({row.state}): {source}",
        file=sys.stderr,
    )
    _emit(text)
    return 0


def add_parser(sub: Any) -> None:
    j = sub.add_parser("jobs", help="a campaign's jobs: state, host, progress, ETA, USD, tries")
    j.add_argument("--campaign", help="one campaign only")
    j.add_argument("--ledger", help="the campaign's ledger (default: the user's that has it)")
    j.add_argument("--json", action="store_true", help="the jobs as a JSON list")
    j.set_defaults(fn=cmd_jobs)
    lg = sub.add_parser("logs", help="a job's output, off its host or kept at its end (-f follows)")
    lg.add_argument("job", metavar="JOB", help="the job's name")
    lg.add_argument(
        "--campaign",
        help="its campaign (default: the running controller's, else the only campaign of the "
        "ledger with a job of that name; the others are named on stderr)",
    )
    lg.add_argument("--ledger", help="the campaign's ledger (default: the user's that has it)")
    lg.add_argument("-f", "--follow", action="store_true", help="follow it while it runs")
    lg.add_argument("--ssh-key", help="rentwatch's SSH key (default: in the user's data dir)")
    lg.set_defaults(fn=cmd_logs)
