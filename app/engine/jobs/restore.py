"""A campaign's jobs after a controller restart, from its ledger: finished jobs stay finished,
started ones are re-attached to their hosts, and one that exited but whose artifacts never came
off its host is finishing again (its output is still on that disk, and the campaign is not done
without it: `JobWork._settle` pulls it, or `reap` requeues it if the host is gone)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...ledger import EventKind, Ledger

if TYPE_CHECKING:
    from .work import JobWork

K = EventKind


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
            job.attempts = int(ev.detail.get("attempt", job.attempts + 1))
            if ev.instance_id is not None:  # its state is on that disk, newer than a pull
                work.rescues.last_host[job.name] = ev.instance_id
        elif ev.detail.get("requeued"):
            job.status, job.instance_id = "pending", None
            job.host_losses += bool(ev.detail.get("host_loss"))
        else:
            work.queue.finished(job, int(ev.detail.get("exit_code", -1)), ev.at)
            if "exit_code" in ev.detail and ev.instance_id is not None:  # its own end, not a loss
                exited[job.name] = (ev.at, ev.instance_id)
    for ev in ledger.campaign_events(campaign, K.ARTIFACTS):
        name, files = str(ev.detail.get("job")), ev.detail.get("files")
        if ev.ok and isinstance(files, list):  # what is on the controller's disk already
            dest = str(ev.detail.get("dest", ""))
            kind = "checkpoint" if dest.endswith("/checkpoint") else "artifacts"
            work.pulls.room.pulled(name, kind, files)
            if kind == "checkpoint":
                work.last_pulled(name, ev.at)
            elif name in exited and ev.at >= exited[name][0]:
                del exited[name]  # its output came off after its exit
    for name, (_, host) in exited.items():
        job = work.queue.by_name(name)
        if job is not None and job.job.artifacts:
            job.status, job.instance_id = "finishing", host
