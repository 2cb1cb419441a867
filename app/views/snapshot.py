"""Immutable snapshots of the engine's state, built in the engine's thread and handed to the UI
whole. The campaign's figures are the receipt's: `core.figures.summarize` over tenures."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.figures import Tenure, delivered_hours, summarize
from ..core.jobs import JobState
from ..core.lifecycle import Phase, Transition
from ..core.rules import freeze_window
from ..core.text import clean
from ..engine.attempt import Attempt
from ..engine.ending import end_command
from ..engine.supervisor import Supervisor
from ..sim.served import served_here


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
    # the running job's delivery (core/delivery.py): its progress (0..1; None: it writes none),
    # the market seconds left, the host's delivered TFLOP/s against its model's
    job_progress: float | None = None
    job_eta_s: float | None = None
    job_tflops: float | None = None
    model_tflops: float | None = None
    job_eta_source: str = ""  # "progress" (the job's own reading) or "preflight" (estimated)
    supervised: bool = True  # False: not rentwatch's; shown and priced, only a person acts
    left_why: str = ""  # why it left service (stopped, given up, gone): who, and what for
    # the interruptible tier: the bid in force and the bid_floor last shown ($/h), and, while an
    # outbid pauses it (phase `outbid`), how long it has been paused (market seconds)
    bid: float | None = None
    bid_floor: float | None = None
    paused_s: float | None = None
    # the last NVML sample's vital signs (core/preflight/vitals.py; None: not reported or not believed)
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    fan_pct: float | None = None
    # what it bills per hour right now, by the billing code (`rate_now`): storage only while
    # stopped (or while its GPU does not bill yet), nothing once destroyed; None: not known
    dph_now: float | None = None
    gpu_billing_now: bool = True

    @property
    def rate(self) -> float:
        """$/h now where known, else the listed GPU and storage price."""
        return self.dph if self.dph_now is None else self.dph_now

    @property
    def rate_figure(self) -> str:
        return rate_figure(self.dph_now, self.gpu_billing_now, self.dph)


def rate_figure(dph_now: float | None, gpu_billing_now: bool, listed: float) -> str:
    """The one way a rental's $/h now is written: `rate_now`, else the listed price."""
    if dph_now is None:
        return f"{listed:.3f}"
    return f"{dph_now:.3f}" if gpu_billing_now else f"{dph_now:.4f}"


@dataclass(frozen=True)
class FleetReadout:
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
    banner: str | None = None  # a campaign fault: creates stopped until the operator fixes it
    in_service: int = 0  # supervised, proven and verified now (out of `fleet` wanted)
    jobs_finished: int = 0
    observe_only: bool = False  # watch without a campaign: automation touches nothing
    observed: int = 0  # live instances shown but not supervised (not rentwatch's)
    observed_dph: float = 0.0  # what those bill per hour now (storage, and GPU unless stopped)
    engine_error: str | None = None  # why the engine cannot supervise now (a rejected key)
    time_scale: float = 1.0  # market seconds per wall second (1: the real market)
    budget_usd: float | None = None  # the campaign's spend cap
    dph_now: float = 0.0  # what the instances held bill per hour right now, as billing counts
    # never delivered and no dud (`core.figures`): outbid or stopped by the market before it
    # was proven, and cancelled by the campaign or a person; counted apart from the duds
    stopped_by_market: int = 0
    cancelled: int = 0
    # `rentwatch end` for this campaign as it works when pasted (its ledger, its market)
    end_command: str = ""
    # the market is a simulator inside the engine's process (the demo's): it and every rental
    # on it end with that process, and nothing is left billing
    market_built_in: bool = False

    @property
    def stopped(self) -> int:
        """The campaign's rentals billing storage only while they do not run (stopped, or
        paused by an outbid), as its `dph_now` counts them: an observed one is not in it."""
        return sum(1 for s in self.instances if s.supervised and s.phase in ("stopped", "outbid"))

    @property
    def held(self) -> int:
        """What quit acts on: the campaign's live rentals (the rest are not rentwatch's)."""
        return sum(1 for s in self.instances if s.ended_at is None and s.supervised)

    def bulk_candidates(self) -> list[InstanceSnap]:
        """Stopped rentals still billing storage that never verified or went offline, to clear out
        in one go; never an instance rentwatch did not create."""
        return [
            s
            for s in self.instances
            if s.supervised
            and s.phase == "stopped"
            and (not s.passed_preflight or s.status == "offline")
        ]

    @property
    def dud_share(self) -> float:
        return self.duds / self.creates if self.creates else 0.0

    @property
    def usd_per_gpu_hour(self) -> float | None:
        return self.spent_usd / self.gpu_hours if self.gpu_hours > 0 else None


def rate_now(a: Attempt, mode: str, now: float) -> tuple[float, bool]:
    """The one definition of what a rental bills per hour now, and whether the GPU is in it."""
    c, before = a.charges(mode, now), a.charges(mode, now - 1.0)
    gpu = max(0.0, c.gpu_usd - before.gpu_usd) * 3600
    return gpu + max(0.0, c.storage_usd - before.storage_usd) * 3600, gpu > 0


_BREAKS = frozenset({"stop", "halt", "offline"})
_OUT = (Phase.STOPPED, Phase.ABANDONED, Phase.DESTROYED, Phase.LOST)


def run_samples(a: Attempt, before: float = math.inf) -> list[dict[str, Any]]:
    """Its samples since its last stop (or exit, or outage) before `before`: a restarted, booting
    host's GPU is not the one that read 97% before the stop."""
    cut = max((m.at for m in a.marks if m.kind in _BREAKS and m.at < before), default=None)
    if cut is None:
        return a.samples
    return [s for s in a.samples if not isinstance(s.get("ts"), int | float) or s["ts"] > cut]


def last_run_samples(a: Attempt) -> list[dict[str, Any]]:
    """The samples of its run now, or of the run that ended: never one from before a stop beside a
    later run's."""
    if a.life.phase not in _OUT:
        return run_samples(a)
    last = next(
        (s["ts"] for s in reversed(a.samples) if isinstance(s.get("ts"), int | float)), None
    )
    return a.samples if last is None else run_samples(a, last)


def shown_phase(a: Attempt) -> str:
    """The phase as the dashboard names it: a verified host at work is `working`, one whose
    GPU has gone quiet `idle` (the pane, the table and the detail screen say the same)."""
    p = a.life.phase
    if p == Phase.STOPPED and a.outbid_at is not None and a.resumes_by_itself:
        return "outbid"  # paused by a higher bid: it resumes (and bills) by itself
    # the host's own last NVML sample first: the market's utilization figure lags behind it
    samples = run_samples(a)
    if p == Phase.VERIFIED and samples and (samples[-1].get("util") or 0) >= 50:
        return "working"
    if p == Phase.VERIFIED and a.util_low_since is not None and samples:
        return "idle"
    return str(p)


def left_why(a: Attempt) -> str:
    """Why `a` is out of service: the reason of its first move out since it last moved in, or
    "". A stopped rental destroyed since says why it was destroyed (an end, a person): a stop
    can be undone, a destroy cannot, so its reason is the row's last word."""
    why = ""
    for t in a.life.history:
        if t.after not in _OUT:
            why = ""
        elif (t.before, t.after) == (Phase.STOPPED, Phase.DESTROYED) or (
            not why and t.before not in _OUT
        ):
            why = t.why
    return clean(why, 160) if a.life.phase in _OUT else ""


# the billing marks that end delivery: the ledger's `tenures` view ends it at a stop, a destroy,
# and a status of exited, unknown (the `halt` mark) or offline
_HALTS = frozenset({"stop", "destroy", "halt", "offline"})
_GONE = (Phase.ABANDONED, Phase.DESTROYED, Phase.LOST)


def _standing_moves(a: Attempt) -> list[Transition]:
    """`a`'s lifecycle moves as `standing_events` keeps them: a write-off then a return is void."""
    h = a.life.history
    back = [i for i, t in enumerate(h) if t.before == Phase.LOST and t.after != Phase.DESTROYED]
    last_back = max(back, default=-1)
    return [t for i, t in enumerate(h) if not (t.after == Phase.LOST and i < last_back)]


def _delivered_until(a: Attempt) -> float | None:
    """The first moment after its verification it stopped delivering: stopped, destroyed,
    lost, or its host went down (as the ledger's `tenures` view reads the same events)."""
    if a.verified_at is None:
        return None
    v = a.verified_at
    ends = [m.at for m in a.marks if m.kind in _HALTS and m.at >= v]
    ends += [t.at for t in _standing_moves(a) if t.at >= v and t.after in (Phase.STOPPED, *_GONE)]
    return min(ends) if ends else None


def _resumed_runs(a: Attempt) -> tuple[tuple[float, float | None], ...]:
    """A verified bid rental's runs after each resume by itself: from the resume mark to the
    next mark or move that ends delivery (None: on), as the ledger's `resumed_spans` reads."""
    if a.verified_at is None:
        return ()
    moves = [t.at for t in _standing_moves(a) if t.after in (Phase.STOPPED, *_GONE)]
    out: list[tuple[float, float | None]] = []
    for i, m in enumerate(a.marks):
        if m.kind == "resume" and m.at >= a.verified_at:
            ends = [n.at for n in a.marks[i + 1 :] if n.kind in _HALTS]
            ends += [t for t in moves if t > m.at]
            out.append((m.at, min(ends) if ends else None))
    return tuple(out)


def tenure(
    a: Attempt, campaign: str, billed: float, now: float, jobs_done: int = 0
) -> Tenure | None:
    """What `a` adds to the campaign's receipt (None: the ledger holds no create for it, so
    the receipt does not count it: an instance rentwatch did not create)."""
    if a.offer is None and a.created_by is None:
        return None
    # as the ledger's `lifetime_min`: to its destroy (or vanishing), else its abandon, else now
    moves = _standing_moves(a)
    gone = [t.at for t in moves if t.after in (Phase.DESTROYED, Phase.LOST)]
    gone_at = min(gone) if gone else a.life.since(Phase.ABANDONED)
    return Tenure(
        created=a.offer is not None or a.created_by == campaign,
        verified=a.verified_at is not None,
        gone=gone_at is not None,
        gpu_hours=delivered_hours(a.verified_at, _delivered_until(a), now, _resumed_runs(a)),
        total_usd=billed,
        lifetime_min=((gone_at if gone_at is not None else now) - a.created_at) / 60,
        jobs_finished=jobs_done,
        failure_class=a.failure_class,
        market_stopped=a.market_stop is not None,
    )


def figures(sup: Supervisor, now: float, billed: dict[int, float] | None = None) -> dict[str, Any]:
    """The campaign's receipt, live: the same `summarize` over the attempts held now
    (`billed`: each attempt's charges so far, when the caller has them already)."""
    mode = sup.market.gpu_billing
    if billed is None:
        billed = {a.instance_id: a.charges(mode, now).total_usd for a in sup.attempts.values()}
    done: dict[int, int] = {}
    for j in sup.jobs.jobs:
        if j.status == "done" and j.instance_id is not None:
            done[j.instance_id] = done.get(j.instance_id, 0) + 1
    name = sup.campaign.name
    ts = (
        tenure(a, name, billed[a.instance_id], now, done.get(a.instance_id, 0))
        for a in sup.attempts.values()
    )
    return summarize(name, (t for t in ts if t is not None))


def _delivery_fields(job: JobState | None) -> dict[str, Any]:
    d = job.delivery if job is not None else None
    if d is None:
        return {}
    return {
        "job_progress": d.progress,
        "job_eta_s": d.eta_s,
        "job_tflops": d.tflops,
        "model_tflops": d.model_tflops,
        "job_eta_source": d.source,
    }


# a row's figures as its attempt holds them, and the campaign's as its receipt says them
_HELD = "instance_id machine_id host_id created_at failure_class passed_preflight bid bid_floor"
_RECEIPT = "duds dud_usd stopped_by_market cancelled verified gpu_hours"
_SAMPLED = (
    "util sm_clock max_sm_clock mem_used_mb mem_total_mb temp_c power_w power_limit_w fan_pct"
)
SAMPLE_KEYS = {"temp_c": "temp"}  # a figure whose key in the tender's sample is another


def _sampled(sample: dict[str, Any]) -> dict[str, Any]:
    """The figures of a kept sample (its vital signs read by `core.preflight.vitals`)."""
    return {name: sample.get(SAMPLE_KEYS.get(name, name)) for name in _SAMPLED.split()}


def snapshot(sup: Supervisor, now: float) -> FleetReadout:
    mode = sup.market.gpu_billing
    rows = []
    billed_by = {a.instance_id: a.charges(mode, now).total_usd for a in sup.attempts.values()}
    fig = figures(sup, now, billed_by)
    in_service = observed = 0
    observed_dph = fleet_dph = 0.0  # what the campaign's own bill now, and what observed ones do
    for a in sup.attempts.values():
        billed = billed_by[a.instance_id]
        if a.owned and a.passed_preflight and a.life.phase == Phase.VERIFIED:
            in_service += 1
        dph_now, gpu_now = rate_now(a, mode, now)
        if a.owned:
            fleet_dph += dph_now
        elif a.life.phase not in (Phase.DESTROYED, Phase.LOST):
            observed += 1
            # by its phase: an adopted rental's billing marks start at adoption, without the
            # market's "running" the billing code needs to count its GPU
            observed_dph += a.storage_dph + (a.gpu_dph if a.life.phase != Phase.STOPPED else 0)
        samples = run_samples(a)
        last = samples[-1] if samples else {}
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
                **{name: getattr(a, name) for name in _HELD.split()},
                **_sampled(last),
                gpu_name=clean(a.gpu_name, 40),
                dph=a.gpu_dph + a.storage_dph,
                phase=shown_phase(a),
                status=clean(a.status, 20) if a.status else None,
                status_msg=clean(a.status_msg, 160),
                status_age_s=max(0.0, now - a.status_since),
                freeze_window_s=freeze_window(a.status_msg, sup.policy)
                if sup.policy.freeze_window_s
                else None,
                util_history=tuple(float(s.get("util") or 0) for s in samples[-30:]),
                throttle=a.throttle.reason if a.throttle and a.throttle.throttled else "",
                billed_usd=billed,
                verdict=verdict,
                ended_at=a.life.ended_at(),
                job=clean(a.job_line, 120) if sup.jobs.on(a.instance_id) else "",
                **_delivery_fields(sup.jobs.on(a.instance_id)),
                supervised=a.owned,
                left_why=left_why(a),
                paused_s=None if a.outbid_at is None else max(0.0, now - a.outbid_at),
                dph_now=dph_now,
                gpu_billing_now=gpu_now,
            )
        )
    rows.sort(key=lambda r: (r.ended_at is not None, -r.created_at))
    url = sup.market.base_url
    built_in = served_here(url)
    return FleetReadout(
        time_scale=float(sup.market.time_scale or 1.0),
        budget_usd=sup.campaign.budget_usd,
        dph_now=fleet_dph,
        now=now,
        campaign=sup.campaign.name,
        policy=sup.policy.name,
        fleet=sup.campaign.fleet,
        creates=sup.fleet.creates,
        # the campaign's own cap: an end leaves it no create, and the header says it ended
        max_creates=sup.file_campaign.max_creates,
        instances=tuple(rows),
        quarantined=len(sup.fleet.quarantine),
        **{name: fig[name] for name in _RECEIPT.split()},
        spent_usd=float(fig["total_usd"]),
        jobs_finished=int(fig["jobs_finished"]),
        decisions=tuple(sup.journal.lines[-200:]),
        decisions_total=sup.journal.lines_total,
        finished=sup.finished.reason if sup.finished else None,
        banner=sup.blame_book.banner,
        in_service=in_service,
        observe_only=sup.observe_only,
        observed=observed,
        observed_dph=observed_dph,
        engine_error=clean(sup.failure, 300) if sup.failure else None,
        # a market built into this process is gone with it: not named (the command ends the
        # campaign through its controller while that runs)
        end_command=end_command(sup.campaign.name, sup.ledger.path, "" if built_in else url),
        market_built_in=built_in,
    )
