"""Immutable snapshots of the engine's state: what the dashboard renders, built in the engine's
thread and handed to the UI whole, so widgets never read live engine objects."""

from __future__ import annotations

from dataclasses import dataclass

from .attempt import Attempt
from .core.lifecycle import Phase
from .core.rules import freeze_window
from .core.text import clean
from .supervisor import Supervisor


@dataclass(frozen=True)
class InstanceSnap:
    instance_id: int
    gpu_name: str
    machine_id: int | None
    host_id: int | None
    dph: float
    phase: str
    status: str | None
    status_msg: str
    status_age_s: float
    freeze_window_s: float | None
    util: float | None
    util_history: tuple[float, ...]
    sm_clock: float | None
    max_sm_clock: float | None
    throttle: str
    billed_usd: float
    verdict: str
    created_at: float
    ended_at: float | None
    failure_class: str | None
    passed_preflight: bool
    job: str = ""  # the running job and its last log line


@dataclass(frozen=True)
class FleetSnap:
    now: float
    campaign: str
    policy: str
    fleet: int
    creates: int
    max_creates: int
    instances: tuple[InstanceSnap, ...]
    quarantined: int
    duds: int
    dud_usd: float
    spent_usd: float
    verified: int
    gpu_hours: float
    decisions: tuple[str, ...]
    decisions_total: int  # how many lines the engine has said in all (the tuple is the tail)
    finished: str | None
    time_scale: float = 1.0  # market seconds per wall second (1: the real market)
    budget_usd: float | None = None  # the campaign's spend cap
    dph_now: float = 0.0  # what the instances held bill per hour right now, as billing counts

    @property
    def dud_share(self) -> float:
        return self.duds / self.creates if self.creates else 0.0

    @property
    def usd_per_gpu_hour(self) -> float | None:
        return self.spent_usd / self.gpu_hours if self.gpu_hours > 0 else None


def fleet_rate(sup: Supervisor, now: float) -> float:
    """$/h billed right now over every instance held, by the billing code itself: each one's
    GPU and storage charge over the last second (storage only while stopped, nothing once
    destroyed)."""
    mode = sup.market.gpu_billing
    total = 0.0
    for a in sup.attempts.values():
        c, before = a.charges(mode, now), a.charges(mode, now - 1.0)
        total += max(0.0, c.gpu_usd + c.storage_usd - before.gpu_usd - before.storage_usd)
    return total * 3600


def _phase(a: Attempt) -> str:
    p = a.life.phase
    if p == Phase.VERIFIED and a.util_low_since is not None and a.samples:
        return "idle"
    if p == Phase.VERIFIED and a.samples and (a.samples[-1].get("util") or 0) >= 50:
        return "working"
    return str(p)


def _ended(a: Attempt) -> float | None:
    return a.life.ended_at()


def snapshot(sup: Supervisor, now: float) -> FleetSnap:
    mode = sup.market.gpu_billing
    rows = []
    duds = verified = 0
    dud_usd = spent = gpu_hours = 0.0
    for a in sup.attempts.values():
        billed = a.charges(mode, now).total_usd
        spent += billed
        if a.life.dud:
            duds += 1
            dud_usd += billed
        if a.passed_preflight and a.life.phase == Phase.VERIFIED:
            verified += 1  # held and proven right now
        if a.passed_preflight:
            first = a.life.since(Phase.VERIFIED)
            since = now if first is None else first
            gpu_hours += (
                max(0.0, ((_ended(a) or now) if a.life.phase != Phase.VERIFIED else now) - since)
                / 3600
            )
        last = a.samples[-1] if a.samples else {}
        v = a.verdict
        verdict = ""
        if v is not None:
            verdict = (f"{v.tflops:.1f} TFLOP/s" if v.tflops is not None else "") + (
                f" vs {v.expected:.0f} expected" if v.expected else ""
            )
            if not v.ok:
                verdict = f"FAILED: {clean(v.reason, 90)}"
        elif a.preflight_task is not None and a.life.phase == Phase.VERIFYING:
            verdict = "running preflight…"
        rows.append(
            InstanceSnap(
                instance_id=a.instance_id,
                gpu_name=clean(a.gpu_name, 40),
                machine_id=a.machine_id,
                host_id=a.host_id,
                dph=a.gpu_dph + a.storage_dph,
                phase=_phase(a),
                status=clean(a.status, 20) if a.status else None,
                status_msg=clean(a.status_msg, 160),
                status_age_s=max(0.0, now - a.status_since),
                freeze_window_s=freeze_window(a.status_msg, sup.policy)
                if sup.policy.freeze_window_s
                else None,
                util=last.get("util"),
                util_history=tuple(float(s.get("util") or 0) for s in a.samples[-30:]),
                sm_clock=last.get("sm_clock"),
                max_sm_clock=last.get("max_sm_clock"),
                throttle=a.throttle.reason if a.throttle and a.throttle.throttled else "",
                billed_usd=billed,
                verdict=verdict,
                created_at=a.created_at,
                ended_at=_ended(a),
                failure_class=a.failure_class,
                passed_preflight=a.passed_preflight,
                job=clean(a.job_line, 120) if sup.jobs.on(a.instance_id) else "",
            )
        )
    rows.sort(key=lambda r: (r.ended_at is not None, -r.created_at))
    return FleetSnap(
        time_scale=float(getattr(sup.market, "time_scale", 1.0) or 1.0),
        budget_usd=sup.campaign.budget_usd,
        dph_now=fleet_rate(sup, now),
        now=now,
        campaign=sup.campaign.name,
        policy=sup.policy.name,
        fleet=sup.campaign.fleet,
        creates=sup.creates,
        max_creates=sup.campaign.max_creates,
        instances=tuple(rows),
        quarantined=len(sup.quarantine),
        duds=duds,
        dud_usd=dud_usd,
        spent_usd=spent,
        verified=verified,
        gpu_hours=gpu_hours,
        decisions=tuple(sup.journal.lines[-200:]),
        decisions_total=sup.journal.lines_total,
        finished=sup.finished.reason if sup.finished else None,
    )
