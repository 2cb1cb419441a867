"""What a job's host delivers, as the engine notes it: the job's delivery estimate on each look, and
what a finished job's ledger event says of its host's speed."""

from __future__ import annotations

from typing import Any

from ...core.delivery import estimate, sized
from ...core.jobs import JobState
from ...core.preflight.gpu_specs import expected_tflops
from ..attempt import Attempt

RESUMED_OVER = 1.25  # a run this much faster than its host's preflight did not start from zero


def host_speed(a: Attempt) -> float:
    """A proven host's expected TFLOP/s: its preflight's, less the throttling seen."""
    tflops = a.verdict.tflops if a.verdict is not None and a.verdict.tflops else 0.0
    return tflops * (1 - a.slowdown)


def note_delivery(a: Attempt, job: JobState, progress: float | None, now: float) -> None:
    """The host's delivery to this job: from its progress, else the preflight's speed less
    throttling."""
    if progress is not None:
        job.progress = progress
        # a retry may start from a restored checkpoint: its first reading above 0 is where
        # this host's own work starts from
        if job.progress_base is None and progress > 0 and job.attempts > 1 and job.job.checkpoint:
            job.progress_base = (now, progress)
    tflops = a.verdict.tflops if a.verdict is not None else None
    job.delivery = estimate(
        job.job,
        job.started_at,
        now,
        job.progress,
        a.gpu_name,
        tflops,
        a.slowdown,
        job.progress_base,
    )


def work_detail(a: Attempt, job: JobState, duration: float, ok: bool) -> dict[str, Any]:
    """What a finished job says of its host's delivery, for the ledger (and the hosts
    view's dollars per reference hour): its size, and the speed it got there."""
    d = job.delivery
    out: dict[str, Any] = {}
    tflops, source = (d.tflops, d.source) if d is not None else (None, "")
    if sized(job.job):
        out.update(ref_gpu=job.job.ref_gpu, ref_hours=job.job.ref_hours)
        ref = expected_tflops(job.job.ref_gpu or "")
        if ok and ref and duration > 0:
            out["work_ref_h"] = job.job.ref_hours
            # the speed the whole run got: its size over its time, unless that is faster than
            # the host computes (its preflight's matmul): then part of the work came from a
            # checkpoint made on another host, and the size over this host's time would
            # credit this machine with work it never did
            whole = (job.job.ref_hours or 0) / (duration / 3600) * ref
            measured = a.verdict.tflops if a.verdict is not None else None
            if not measured or whole <= measured * RESUMED_OVER:
                tflops, source = whole, "size"
            else:
                tflops, source = host_speed(a), "preflight"
    if tflops is not None:
        out["delivered_tflops"] = round(tflops, 3)
        out["speed_source"] = source
        model = expected_tflops(a.gpu_name)
        if model:
            out["speed_share"] = round(tflops / model, 4)
    return out


def work_lost(job: JobState) -> float | None:
    """The reference GPU-hours a requeue takes from `job`: what a running job had done, or all of an
    exited-0 job whose output never came off (the ledger voids that exit)."""
    if job.status == "finishing" and job.exit_code == 0:
        return job.job.ref_hours if sized(job.job) else None
    if job.status == "running" and job.delivery is not None and job.delivery.work_ref_h:
        return job.delivery.work_ref_h
    return None
