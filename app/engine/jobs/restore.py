"""A campaign's jobs after a controller restart, from its ledger: finished jobs stay finished,
started ones are re-attached, and one that exited with its artifacts still on its host is
finishing again. A row in a shape no rentwatch writes reads as missing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...ledger import EventKind, Ledger
from .pulls import PULL_TRIES

if TYPE_CHECKING:
    from .work import JobWork

K = EventKind


def _int(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default


def restore_jobs(work: JobWork, ledger: Ledger) -> None:
    campaign = work.journal.campaign
    exited: dict[str, tuple[float, int]] = {}  # job -> (when, host) of an exit not yet followed
    for ev in ledger.campaign_events(campaign, K.JOB_STARTED, K.JOB_FINISHED):
        job = work.queue.by_name(str(ev.detail.get("job")))
        if job is None:
            continue
        exited.pop(job.name, None)
        if ev.kind == K.JOB_STARTED:
            job.status, job.instance_id, job.started_at = "running", ev.instance_id, ev.at
            job.attempts = _int(ev.detail.get("attempt"), job.attempts + 1)
            if ev.instance_id is not None:  # its state is on that disk, newer than a pull
                work.rescues.last_host[job.name] = ev.instance_id
                # a host takes a next job only once the last one's end settled
                exited = {n: e for n, e in exited.items() if e[1] != ev.instance_id}
        elif ev.detail.get("requeued"):
            job.status, job.instance_id = "pending", None
            job.host_losses += bool(ev.detail.get("host_loss"))
        else:
            work.queue.finished(job, _int(ev.detail.get("exit_code"), -1), ev.at)
            if "exit_code" in ev.detail and ev.instance_id is not None:  # its own end, not a loss
                exited[job.name] = (ev.at, ev.instance_id)
    failed: dict[str, int] = {}  # job -> pulls of its artifacts that failed since its exit
    for ev in ledger.campaign_events(campaign, K.ARTIFACTS):
        name, files = str(ev.detail.get("job")), ev.detail.get("files")
        kind = ev.detail.get("kind")
        if ev.ok and isinstance(files, list):  # what is on the controller's disk already
            dest = str(ev.detail.get("dest", ""))
            kind = kind or ("checkpoint" if dest.endswith("/checkpoint") else "artifacts")
            work.pulls.room.pulled(name, str(kind), files)
            if kind == "checkpoint":
                work.last_pulled(name, ev.at)
            elif name in exited and ev.at >= exited[name][0]:
                del exited[name]  # its output came off after its exit
        elif not ev.ok and name in exited and ev.at >= exited[name][0] and kind != "checkpoint":
            # after its exit a job's pulls are of its output (older rows do not say their kind)
            failed[name] = failed.get(name, 0) + 1
    for name, (_, host) in exited.items():
        job = work.queue.by_name(name)
        if job is not None and job.job.artifacts and failed.get(name, 0) < PULL_TRIES:
            job.status, job.instance_id = "finishing", host
            job.pull_tries = failed.get(name, 0)
