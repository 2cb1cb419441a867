"""What a host delivers to a job: its progress, its speed, when it will be done. Pure.

A job may write the fraction done to `$RENTWATCH_PROGRESS` (docs/campaigns.md); for a sized job
progress over time is delivered speed. Without it, the preflight's speed less the throttling seen
since. Reference GPU-hours are the unit of work."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .campaign import Job
from .offers.track_record import Memory
from .offers.work_cost import detect_prior_h
from .preflight.gpu_specs import expected_tflops


@dataclass(frozen=True)
class Delivery:
    progress: float | None  # the job's own reading (0..1), None without one
    tflops: float | None  # delivered TFLOP/s, None where nothing says
    model_tflops: float | None  # what a healthy card of the host's model does
    eta_s: float | None  # market seconds left, None where nothing says
    source: str  # "progress", "preflight" or "" (nothing to go on)
    work_ref_h: float | None = None  # reference GPU-hours done so far (sized jobs)

    @property
    def share(self) -> float | None:
        if self.tflops is None or not self.model_tflops:
            return None
        return self.tflops / self.model_tflops


def sized(job: Job) -> bool:
    return bool(job.ref_gpu and job.ref_hours and expected_tflops(job.ref_gpu))


def estimate(
    job: Job,
    started_at: float | None,
    now: float,
    progress: float | None,
    gpu_name: str,
    preflight_tflops: float | None,
    slowdown: float = 0.0,
    base: tuple[float, float] | None = None,
) -> Delivery:
    """The job's delivery on its host now. `base` is the first reading of an attempt that may have
    resumed from a checkpoint: only the work done since counts."""
    model = expected_tflops(gpu_name)
    since, done_before = base if base is not None else (started_at, 0.0)
    elapsed = max(0.0, now - since) if since is not None else 0.0
    ref = expected_tflops(job.ref_gpu) if job.ref_gpu else None
    hours = job.ref_hours if ref else None
    gained = progress - done_before if progress is not None else 0.0
    if progress is not None and progress > 0 and gained > 0 and elapsed > 0:
        eta = elapsed * (1 - min(progress, 1.0)) / gained
        tflops = gained * hours * ref / (elapsed / 3600) if hours and ref else None
        work = progress * hours if hours else None
        return Delivery(progress, tflops, model, eta, "progress", work)
    measured = preflight_tflops * (1 - max(0.0, min(slowdown, 1.0))) if preflight_tflops else None
    if measured and hours and ref and base is not None and progress is not None:
        left_s = hours * (1 - min(progress, 1.0)) * ref / measured * 3600
        return Delivery(progress, measured, model, left_s, "preflight", progress * hours)
    if measured and hours and ref:
        total_s = hours * ref / measured * 3600
        work = min(hours, elapsed / total_s * hours)
        return Delivery(progress, measured, model, max(0.0, total_s - elapsed), "preflight", work)
    return Delivery(progress, measured, model, None, "preflight" if measured else "")


PRIOR_SHARE = 0.93  # the share of its model's speed a machine we never measured is expected at
UNKNOWN_SHARE = 0.5  # a model the table does not know: half the reference, until measured
DEFAULT_DUD_H = detect_prior_h(45 * 60, 30 * 60)  # the seed's and default's deadlines


@dataclass(frozen=True)
class WorkOutlook:
    """What ranking offers by delivered work needs: the reference speed, the work one host is
    expected to take on, our speed share per machine, a new host's billed hours before work, our
    record per GPU model and a dud's expected hours (`work_cost.detect_h`)."""

    ref_tflops: float
    job_ref_h: float
    speeds: Mapping[int, float] = field(default_factory=dict)
    boot_h: float = 0.25
    models: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    dud_h: float = DEFAULT_DUD_H
    prior_runs: float = 2.0  # work_cost.deliver_odds's strength of each prior
    # our faded record per machine, host, model and price band (track_record.py); None: the
    # odds read `models` and the machine history alone
    memory: Memory | None = None

    def rate(self, gpu_name: str, machine_id: int | None) -> float:
        """Reference GPU-hours an hour this offer should deliver: model speed times its share."""
        model = expected_tflops(gpu_name)
        share = self.speeds.get(machine_id, PRIOR_SHARE) if machine_id is not None else PRIOR_SHARE
        if not model:
            return UNKNOWN_SHARE * share / PRIOR_SHARE
        return model * share / self.ref_tflops


def outlook(
    jobs: list[Job],
    speeds: Mapping[int, float],
    hosts: int,
    models: Mapping[str, tuple[float, float]] | None = None,
    dud_h: float = DEFAULT_DUD_H,
    prior_runs: float = 2.0,
    memory: Memory | None = None,
) -> WorkOutlook | None:
    """The outlook for the sized jobs still to run (None: none is sized), each host expected
    to take an equal share of the work left, at least one job."""
    left = [j for j in jobs if sized(j)]
    if not left:
        return None
    ref = expected_tflops(left[0].ref_gpu or "") or 1.0
    total = sum(j.ref_hours or 0 for j in left)
    per_host = max(max(j.ref_hours or 0 for j in left), total / max(1, hosts))
    return WorkOutlook(
        ref,
        per_host,
        dict(speeds),
        models=dict(models or {}),
        dud_h=dud_h,
        prior_runs=prior_runs,
        memory=memory,
    )
