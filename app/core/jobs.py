"""The job queue: which job runs where, and what a host's death or a job's exit means for it.
Pure: the supervisor applies these transitions and does the I/O."""

from __future__ import annotations

from dataclasses import dataclass

from .campaign import Job
from .delivery import Delivery

# A host that leaves service this soon after taking a job failed to deliver (a dud its
# preflight missed), so the job is not charged a retry for it; managed-job schedulers treat a
# lost machine the same way (SkyPilot's managed jobs recover from preemptions without counting
# them against `max_restarts_on_errors`). A job whose hosts keep dying at once may be what
# kills them, so only so many such losses are free.
EARLY_LOSS_S = 10 * 60
FREE_LOSSES = 5


@dataclass
class JobState:
    job: Job
    # pending, running, finishing (exited, artifacts coming off), done, failed
    status: str = "pending"
    instance_id: int | None = None
    attempts: int = 0  # starts, free host losses included
    host_losses: int = 0  # starts lost to a host that died early (not charged as retries)
    exit_code: int | None = None
    started_at: float | None = None
    seen_running_at: float | None = None  # this attempt last seen running (None: never)
    finished_at: float | None = None
    progress: float | None = None  # the job's own progress reading on this attempt (0..1)
    # a retry's first reading (time, progress): what it restored is not this attempt's work
    progress_base: tuple[float, float] | None = None
    delivery: Delivery | None = None  # its host's delivery, as of the last look
    pull_tries: int = 0  # this attempt's end: pulls of its artifacts that failed

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def size(self) -> float:
        """Its reference GPU-hours (0: not sized)."""
        return self.job.ref_hours or 0.0 if self.job.ref_gpu else 0.0

    def held_by(self, instance_id: int, status: str = "running") -> bool:
        """Still in `status` on that instance: asked again after each await, since `JobWork.reap`
        may have queued the job again meanwhile and another host taken it."""
        return self.status == status and self.instance_id == instance_id


class JobQueue:
    def __init__(self, jobs: tuple[Job, ...]) -> None:
        self.jobs = [JobState(j) for j in jobs]

    def by_name(self, name: str) -> JobState | None:
        return next((j for j in self.jobs if j.name == name), None)

    @property
    def pending(self) -> int:
        return sum(1 for j in self.jobs if j.status == "pending")

    @property
    def running(self) -> int:
        return sum(1 for j in self.jobs if j.status in ("running", "finishing"))

    @property
    def total(self) -> int:
        return len(self.jobs)

    def on(self, instance_id: int, status: str = "running") -> JobState | None:
        """The job in `status` on this instance ("finishing": exited, its artifacts to come off)."""
        return next((j for j in self.jobs if j.held_by(instance_id, status)), None)

    def holds(self, instance_id: int) -> bool:
        """A job runs on it, or has exited there and its artifacts are still coming off."""
        return any(
            j.instance_id == instance_id and j.status in ("running", "finishing") for j in self.jobs
        )

    def free_since(self, instance_id: int, verified_at: float | None) -> float | None:
        """Since when the instance has had no job: its last job's end, else its verification."""
        ends = [j.finished_at for j in self.jobs if j.instance_id == instance_id]
        return max((e for e in (*ends, verified_at or None) if e is not None), default=None)

    def take(self, instance_id: int, now: float, biggest: bool = False) -> JobState | None:
        """The next pending job for a free, proven instance: in campaign order, or with `biggest`
        the largest first (so the last job does not start late on a slow host)."""
        if self.holds(instance_id):  # running, or its last job's artifacts coming off
            return None
        pending = [j for j in self.jobs if j.status == "pending"]
        if biggest:
            pending.sort(key=lambda j: -j.size)  # stable: campaign order among equals
        job = pending[0] if pending else None
        if job is not None:
            job.status, job.instance_id, job.started_at = "running", instance_id, now
            job.seen_running_at = None
            job.attempts += 1
            job.exit_code = None
            job.progress = job.delivery = job.progress_base = None
            job.pull_tries = 0
        return job

    def finished(self, job: JobState, exit_code: int, now: float) -> None:
        """A job that exits non-zero on a healthy host failed on its own: not retried blindly."""
        job.exit_code, job.finished_at = exit_code, now
        job.status = "done" if exit_code == 0 else "failed"

    def host_died(
        self,
        instance_id: int,
        now: float | None = None,
        host_fault: bool = False,
        outbid: bool = False,
    ) -> list[JobState]:
        """Jobs interrupted by their host's death go back to the queue while retries last. With
        `host_fault`, a host lost within `EARLY_LOSS_S` of the start costs no retry (up to
        `FREE_LOSSES`); an outbid never costs one; an exited job whose artifacts never came off
        goes back too."""
        out = []
        for job in self.jobs:
            if job.status in ("running", "finishing") and job.instance_id == instance_id:
                job.instance_id = None
                early = now is None or job.started_at is None or now - job.started_at < EARLY_LOSS_S
                if outbid or (host_fault and early and job.host_losses < FREE_LOSSES):
                    job.host_losses += 1
                charged = job.attempts - job.host_losses
                job.status = "pending" if charged <= job.job.retries else "failed"
                out.append(job)
        return out

    def campaign_ended(self, now: float) -> list[JobState]:
        """The campaign's end interrupts the jobs on its hosts, and no host of this run will
        take them up: a running one ends failed where it stands (its host and progress kept),
        an exited one whose output was still coming off ends by its exit; a job never started
        stays pending. Returns the running ones it interrupted."""
        out = []
        for job in self.jobs:
            if job.status == "finishing":
                self.finished(job, -1 if job.exit_code is None else job.exit_code, now)
            elif job.status == "running":
                job.status, job.finished_at = "failed", now
                out.append(job)
        return out


@dataclass(frozen=True)
class Slot:
    """A proven host as the dispatch rule sees it."""

    instance_id: int
    speed: float  # expected TFLOP/s (its preflight's, less the throttling seen)
    busy: bool  # a job is on it (running, or its artifacts coming off: `JobQueue.holds`)
    swap_due: bool  # to be stopped for a faster host once free (core/swap)
    routed: bool  # the last list answer gave an SSH route to start a job over


@dataclass(frozen=True)
class Dispatch:
    """Start the next pending job on this host."""

    instance_id: int
    rule: str = "rule:dispatch"


def dispatches(slots: list[Slot], pending: int, by_work: bool, fault: bool) -> list[Dispatch]:
    """Which proven hosts get the next pending jobs, in order: none under a campaign fault; with
    `by_work` the fastest first. A busy host, one due for a swap or without SSH gets none."""
    if fault or pending <= 0:
        return []
    order = sorted(slots, key=lambda s: s.speed, reverse=True) if by_work else slots
    return [Dispatch(s.instance_id) for s in order if s.routed and not (s.busy or s.swap_due)]
