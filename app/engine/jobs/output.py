"""A job's output (what it printed: its `log` on the host): read off its host while it runs
there, kept on the controller's disk once it ended (pulled when it settles, with its artifacts),
and otherwise the tail its last end recorded in the ledger. The text is the host's: the caller
cleans it before it reaches a terminal."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.campaign import Job
from ...core.errors import RentwatchError
from ...core.lifecycle import Phase
from ...ledger import EventKind
from ..attempt import Attempt
from ..hosts.link import HostLink
from ..hosts.ssh import SSHFailure
from ..journal import Journal
from .pull import private_dirs
from .runner import job_dir

if TYPE_CHECKING:
    from ..supervisor import Supervisor

LOG_KEEP = 512 * 1024  # bytes of a job's log kept when it is pulled off (its end)
LOG_SHOWN = 64 * 1024  # bytes read off a host at one look (a screen, a follow's step)
LOG_NAME = "rentwatch-job.log"  # beside the job's artifacts on the controller


class NoSuchJob(RentwatchError):
    title = "no such job"


@dataclass(frozen=True)
class JobOutput:
    job: str
    text: str  # the host's bytes, decoded; not cleaned
    source: str  # where it came from, as a person reads it
    live: bool  # read off its host now: a follow asks again


def log_command(job: Job, most: int = LOG_SHOWN) -> str:
    """The last `most` bytes of the job's output on its host."""
    return f"tail -c {int(most)} {job_dir(job.name)}/log 2>/dev/null; true"


def log_path(artifacts_root: Path, campaign: str, job: str) -> Path:
    return artifacts_root / campaign / job / LOG_NAME


async def pull_log(
    link: HostLink, journal: Journal, artifacts_root: Path, a: Attempt, job: Job
) -> None:
    """Keep the last LOG_KEEP bytes of an ended job's output on the controller, and say where
    in the ledger; a host that does not answer leaves the ledger's tail as its last word."""
    try:
        res = await link.run(a, log_command(job, LOG_KEEP))
    except SSHFailure as exc:
        journal.say(f"log    {job.name}: not pulled ({exc})")
        return
    path = log_path(artifacts_root, journal.campaign, job.name)
    private_dirs(artifacts_root, path.parent)
    part = path.with_name(f".{path.name}.part")
    with contextlib.suppress(FileNotFoundError):
        part.unlink()
    fd = os.open(part, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(res.stdout[-LOG_KEEP:])
    part.replace(path)
    journal.fact(
        EventKind.NOTE,
        a,
        actor="engine",
        ok=True,
        reason=f"output of job {job.name} kept ({len(res.stdout)} bytes) at {path}",
        detail={"class": "job_log", "job": job.name, "path": str(path)},
    )


def read_kept(path: Path, most: int = LOG_SHOWN) -> str | None:
    """The last `most` bytes of a kept log, or None when there is none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - most))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return None


async def read_output(sup: Supervisor, name: str, most: int = LOG_SHOWN) -> JobOutput:
    """The job's output now: off its host while it runs on a rental in service, else the log
    kept at its end, else the tail of its last end in the ledger."""
    job = sup.jobs.by_name(name)
    if job is None:
        raise NoSuchJob(f"the campaign {sup.campaign.name} has no job {name!r}")
    a = sup.attempts.get(job.instance_id) if job.instance_id is not None else None
    if (
        job.status in ("running", "finishing")
        and a is not None
        and a.life.phase == Phase.VERIFIED
        and a.ssh_host is not None
    ):
        try:
            res = await sup.link.run(a, log_command(job.job, most))
            text = res.stdout.decode("utf-8", errors="replace")
            return JobOutput(name, text, f"its host i:{a.instance_id}", True)
        except SSHFailure as exc:
            said = f"its host i:{a.instance_id} did not answer ({exc})"
            return JobOutput(name, "", said, True)
    kept = read_kept(log_path(sup.job_work.pulls.artifacts_root, sup.campaign.name, name), most)
    if kept is not None:
        return JobOutput(name, kept, "its output kept when it ended", False)
    ends = sup.ledger.campaign_events(sup.campaign.name, EventKind.JOB_FINISHED)
    tail = next(
        (
            str(e.detail.get("log_tail") or "")
            for e in reversed(ends)
            if e.detail.get("job") == name and e.detail.get("log_tail")
        ),
        None,
    )
    if tail is not None:
        return JobOutput(name, tail, "the tail its end left in the ledger", False)
    said = "not started yet" if job.status == "pending" else "no output recorded"
    return JobOutput(name, "", said, job.status == "pending")
