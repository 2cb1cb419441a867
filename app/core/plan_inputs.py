"""What the plan reads off the engine's own choice: the offers in the rules' order priced as their
creates would pay, with the policy's odds, speeds and outbid rates, and the sized jobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .bidding.tier import checkpoint_every_s, outbid_cost
from .billing import storage_per_hour
from .campaign import Campaign, Job
from .decisions import FleetSnapshot
from .delivery import PRIOR_SHARE, WorkOutlook, outlook, sized
from .offers.choice import work_odds
from .offers.picks import Pick
from .offers.work_cost import detect_prior_h
from .plan import Candidate, PlanInputs
from .policy import Policy
from .preflight.gpu_specs import expected_tflops


@dataclass(frozen=True)
class Sized:
    """The campaign's jobs as the plan counts them."""

    ref_h: tuple[float, ...]  # each sized job's reference GPU-hours, in the outlook's unit
    unsized: tuple[str, ...]  # jobs with no size: their run time is not known


def sized_jobs(jobs: Sequence[Job], work: WorkOutlook | None) -> Sized:
    ref = work.ref_tflops if work is not None else None
    out, unsized = [], []
    for j in jobs:
        if not sized(j):
            unsized.append(j.name)
            continue
        own = expected_tflops(j.ref_gpu or "") or 1.0
        out.append((j.ref_hours or 0.0) * (own / ref if ref else 1.0))
    return Sized(tuple(out), tuple(unsized))


def outlook_for(
    snap: FleetSnapshot, jobs: Sequence[Job], fleet: int, policy: Policy
) -> WorkOutlook | None:
    """The engine's outlook where it ranks by work; else one from the policy's deadlines (a
    policy that ranks by price reads no speeds, but its hosts still work at them)."""
    if snap.work is not None:
        return snap.work
    prior = detect_prior_h(
        policy.boot_deadline_s, max(policy.preflight_deadline_s, policy.ssh_deadline_s)
    )
    return outlook(list(jobs), {}, fleet, dud_h=prior, prior_runs=policy.odds_prior_runs)


def plan_inputs(
    snap: FleetSnapshot,
    picks: Sequence[Pick],
    campaign: Campaign,
    policy: Policy,
    gpu_billing: str = "running",
    jobs_left: Sequence[Job] | None = None,
) -> tuple[PlanInputs, Sized] | None:
    """The plan's inputs (None: no sized job left). `gpu_billing`: the market's rule; `jobs_left`:
    the jobs a start would run (default: the campaign's)."""
    left = campaign.jobs if jobs_left is None else jobs_left
    work = outlook_for(snap, left, campaign.fleet, policy)
    if work is None:
        return None
    jobs = sized_jobs(left, work)
    if not jobs.ref_h:
        return None
    tier = snap.bidding
    may_bid = tier is not None and tier.tier == "interruptible"
    cands = []
    for p in picks:
        o = p.listed
        storage = storage_per_hour(campaign.disk_gb, o.storage_cost)
        low = o.gpu_dph
        if may_bid and o.bid_floor is not None and o.bid_floor > 0:
            low = min(low, o.bid_floor)
        ob = ckpt = ob_usd = 0.0
        if p.bid is not None and tier is not None:
            ob = tier.rate(o.machine_id, o.gpu_name)
            ckpt = checkpoint_every_s(tier.checkpoint_s, ob) / 3600
            ob_usd = outbid_cost(p.bid, o.gpu_dph, tier.move_share)
        cands.append(
            Candidate(
                usd_per_h=p.paid.dph_total,
                storage_per_h=storage,
                rate=work.rate(o.gpu_name, o.machine_id),
                full_rate=work.rate(o.gpu_name, None) / PRIOR_SHARE,
                p=work_odds(snap.history, work, o.gpu_name, o.machine_id),
                outbid_per_h=ob,
                ckpt_h=ckpt,
                outbid_usd=ob_usd,
                floor_per_h=low + storage,
                beat_per_h=o.bid_floor + storage if p.bid is not None and o.bid_floor else None,
            )
        )
    runs = sum(g + b for g, b, _ in snap.history.values())
    grace = policy.drained_grace_s if policy.drained_grace_s is not None else policy.idle_grace_s
    inputs = PlanInputs(
        candidates=tuple(cands),
        jobs_ref_h=jobs.ref_h,
        hosts=max(1, min(campaign.fleet, len(jobs.ref_h))),
        first=max(1, sum(1 for p in picks if p.first)),
        boot_h=work.boot_h,
        dud_h=work.dud_h,
        tail_h=grace / 3600,
        odds_runs=work.prior_runs + runs,
        gpu_from_create=gpu_billing == "created",
        max_creates=max(1, snap.max_creates - snap.creates),
    )
    return inputs, jobs
