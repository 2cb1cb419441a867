"""A job's output (its `log` on the host): the command that reads it, and where its last part is
kept on the controller's disk once the job ended (pull.py). Host text: whoever shows it cleans
it first."""

from __future__ import annotations

import os
from pathlib import Path

from ...core.campaign import Job
from .runner import job_dir

LOG_KEEP = 512 * 1024  # bytes of a job's log kept when it is pulled off (its end)
LOG_SHOWN = 64 * 1024  # bytes read off a host at one look (a screen, a follow's step)
LOG_NAME = "rentwatch-job.log"  # beside the job's artifacts on the controller


def log_command(job: Job, most: int = LOG_SHOWN) -> str:
    """The last `most` bytes of the job's output on its host."""
    return f"tail -c {int(most)} {job_dir(job.name)}/log 2>/dev/null; true"


def log_path(artifacts_root: Path, campaign: str, job: str) -> Path:
    return artifacts_root / campaign / job / LOG_NAME


def read_kept(path: Path, most: int = LOG_SHOWN) -> str | None:
    """The last `most` bytes of a kept log, or None when there is none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - most))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
