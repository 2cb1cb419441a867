"""A job's output (its `log` on the host): the command that reads it, and its last part kept on the
controller's disk once the job ended. Host text: whoever shows it cleans it first."""

from __future__ import annotations

import os
from pathlib import Path

from ...core.campaign import Job
from ...ledger import EventKind
from ..attempt import Attempt
from ..hosts.link import HostLink
from ..hosts.ssh import SSHFailure
from ..journal import Journal
from .pull import private_dirs, private_file
from .runner import job_dir

LOG_KEEP = 512 * 1024  # bytes of a job's log kept when it is pulled off (its end)
LOG_SHOWN = 64 * 1024  # bytes read off a host at one look (a screen, a follow's step)
LOG_NAME = "rentwatch-job.log"  # beside the job's artifacts on the controller


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
    if not res.stdout:
        return  # it printed nothing: nothing to keep
    path = log_path(artifacts_root, journal.campaign, job.name)
    private_dirs(artifacts_root, path.parent)
    with private_file(path) as f:
        f.write(res.stdout[-LOG_KEEP:])
    journal.fact(
        EventKind.NOTE,
        a,
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
