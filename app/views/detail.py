"""One instance in depth, for the dashboard's detail screen, built in the engine's thread so the
widget never calls the market or the ledger. The market's logs come through `Market.request_logs`
(Vast's `request_logs`, then its `result_url`, as the CLI's `logs` does). Host and market text is
cleaned here and again where drawn."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Any

from ..core.errors import RentwatchError
from ..core.lifecycle import Phase
from ..core.records import record
from ..core.text import clean
from ..engine.supervisor import Supervisor
from ..ledger.kinds import EventKind as K
from .snapshot import SAMPLE_KEYS, last_run_samples, rate_now, shown_phase

LOG_TAIL = 40  # market log lines asked for
LOG_TIMEOUT_S = 8.0  # wall seconds: a slow log answer must not hold the screen
EVENTS_SHOWN = 60


class NoSuchInstance(RentwatchError):
    title = "not held"


@dataclass(frozen=True)
class StatusLine:
    at: float
    status: str
    msg: str


@dataclass(frozen=True)
class Sample:
    at: float
    util: float | None
    sm_clock: float | None
    max_sm_clock: float | None
    reasons: tuple[str, ...]
    # vital signs (core/preflight/vitals.py): None where the card does not report one
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    fan_pct: float | None = None
    ecc_corrected: float | None = None
    ecc_uncorrected: float | None = None
    retired_pages: float | None = None


_SAMPLE_FIGURES = [f.name for f in dataclasses.fields(Sample) if f.name not in ("at", "reasons")]
_HELD = "instance_id machine_id host_id created_at gpu_dph storage_dph"  # as its attempt holds them


@dataclass(frozen=True)
class JobLine:
    name: str
    status: str
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    last_line: str
    progress: float | None = None  # the job's own reading (0..1)
    eta_s: float | None = None  # market seconds left ("~" estimated where no reading says)
    eta_estimated: bool = False
    tflops: float | None = None  # the host's delivered speed to it


@dataclass(frozen=True)
class LedgerLine:
    seq: int
    at: float
    kind: str
    actor: str
    ok: bool | None
    reason: str


@dataclass(frozen=True)
class InstanceDetail:
    instance_id: int
    now: float
    time_scale: float  # market seconds per wall second: 1 on the real market
    gpu_name: str
    machine_id: int | None
    host_id: int | None
    phase: str
    status: str
    status_msg: str
    created_at: float
    ended_at: float | None
    gpu_dph: float
    storage_dph: float
    gpu_usd: float
    storage_usd: float
    bandwidth_usd: float
    preflight: dict[str, Any]  # tflops, expected, ok, reason, name, driver, cuda (None unknown)
    status_history: tuple[StatusLine, ...]
    samples: tuple[Sample, ...]
    jobs: tuple[JobLine, ...]
    market_logs: tuple[str, ...]
    market_logs_error: str
    events: tuple[LedgerLine, ...]
    dph_now: float | None = None  # what it bills per hour now (`snapshot.rate_now`)
    gpu_billing_now: bool = True

    @property
    def total_usd(self) -> float:
        return self.gpu_usd + self.storage_usd + self.bandwidth_usd


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _preflight(
    doc: dict[str, Any] | None, verdict: Any, failed_probe: dict[str, Any]
) -> dict[str, Any]:
    """The preflight document's figures a person checks: speed against the model's expected
    speed, and what the host said it is (NVML name, driver, CUDA)."""
    src: dict[str, Any] = doc if isinstance(doc, dict) else failed_probe
    raw_device, raw_matmul = src.get("device"), src.get("matmul")
    device: dict[str, Any] = raw_device if isinstance(raw_device, dict) else {}
    matmul: dict[str, Any] = raw_matmul if isinstance(raw_matmul, dict) else {}
    return {
        "ran": bool(src) or verdict is not None,
        "ok": None if verdict is None else bool(verdict.ok),
        "reason": "" if verdict is None else clean(verdict.reason, 200),
        "tflops": _num(matmul.get("tflops"))
        if matmul
        else (None if verdict is None else verdict.tflops),
        "expected": None if verdict is None else verdict.expected,
        "name": clean(device.get("name"), 80) if device.get("name") else None,
        "driver": clean(device.get("driver_version"), 40) if device.get("driver_version") else None,
        "cuda": clean(device.get("cuda_version"), 20) if device.get("cuda_version") else None,
        "backend": clean(matmul.get("backend"), 20) if matmul.get("backend") else None,
    }


async def _market_logs(sup: Supervisor, instance_id: int) -> tuple[tuple[str, ...], str]:
    try:
        text = await asyncio.wait_for(
            sup.market.request_logs(instance_id, tail=LOG_TAIL), LOG_TIMEOUT_S
        )
    except TimeoutError:
        return (), f"the market did not answer within {LOG_TIMEOUT_S:.0f}s"
    except (RentwatchError, OSError) as exc:
        return (), clean(f"{type(exc).__name__}: {exc}", 200)
    lines = [clean(line, 300) for line in text.splitlines() if line.strip()]
    return tuple(lines[-LOG_TAIL:]), ""


async def build(sup: Supervisor, instance_id: int, logs: bool = True) -> InstanceDetail:
    """Everything the detail screen shows about one held (or once held) instance. The market is
    asked for logs only with `logs` and while the instance still exists there."""
    a = sup.attempts.get(instance_id)
    if a is None:
        raise NoSuchInstance(f"instance {instance_id} is not part of this campaign")
    with_logs = logs and a.life.phase not in (Phase.DESTROYED, Phase.LOST)  # stopped: still there
    now = sup.now()
    money = a.charges(sup.market.gpu_billing, now)
    dph_now, gpu_now = rate_now(a, sup.market.gpu_billing, now)
    events = sup.ledger.instance_events(instance_id, sup.campaign.name, last=400)
    history = [
        StatusLine(
            e.at, clean(e.detail.get("status") or "", 20), clean(e.detail.get("msg") or "", 200)
        )
        for e in events
        if e.kind == K.STATUS
    ]
    failed_probe = next(
        (
            e.detail.get("probe") or {}
            for e in reversed(events)
            if e.kind == K.PREFLIGHT_FAILED and isinstance(e.detail.get("probe"), dict)
        ),
        {},
    )
    samples = tuple(
        Sample(
            at=float(s.get("ts") or 0.0),
            reasons=tuple(clean(r, 40) for r in s.get("reasons") or ()),
            **{name: _num(s.get(SAMPLE_KEYS.get(name, name))) for name in _SAMPLE_FIGURES},
        )
        for s in last_run_samples(a)[-120:]
    )
    jobs = tuple(
        JobLine(
            name=clean(j.name, 60),
            status=j.status,
            started_at=j.started_at,
            finished_at=j.finished_at,
            exit_code=j.exit_code,
            last_line=clean(a.job_line, 200) if j.status == "running" else "",
            progress=d.progress if d else None,
            eta_s=d.eta_s if d else None,
            eta_estimated=bool(d and d.source != "progress"),
            tflops=d.tflops if d else None,
        )
        for j in sup.jobs.jobs
        if j.instance_id == instance_id
        for d in [j.delivery if j.status == "running" else None]
    )
    market_logs, logs_error = (
        await _market_logs(sup, instance_id)
        if with_logs
        else ((), "not asked (the instance is gone)" if logs else "")
    )
    return InstanceDetail(
        **{name: getattr(a, name) for name in _HELD.split()},
        **{name: getattr(money, name) for name in ("gpu_usd", "storage_usd", "bandwidth_usd")},
        now=now,
        time_scale=float(sup.market.time_scale or 1.0),
        gpu_name=clean(a.gpu_name, 40),
        phase=shown_phase(a),
        status=clean(a.status, 20) if a.status else "",
        status_msg=clean(a.status_msg, 200),
        ended_at=a.life.ended_at(),
        preflight=_preflight(a.preflight_doc, a.verdict, failed_probe),
        status_history=tuple(history),
        samples=samples,
        jobs=jobs,
        market_logs=market_logs,
        market_logs_error=logs_error,
        events=tuple(
            LedgerLine(e.seq, e.at, str(e.kind), clean(e.actor, 40), e.ok, clean(e.reason, 200))
            for e in events[-EVENTS_SHOWN:]
        ),
        dph_now=dph_now,
        gpu_billing_now=gpu_now,
    )


# -- the wire ------------------------------------------------------------------------------
_PARTS = {
    "status_history": StatusLine,
    "samples": Sample,
    "jobs": JobLine,
    "events": LedgerLine,
}


def detail_from_json(data: dict[str, Any]) -> InstanceDetail:
    parts = {
        key: tuple(
            record(cls, row, reasons=tuple(row.get("reasons") or ()))
            if cls is Sample
            else record(cls, row)
            for row in data.get(key) or ()
        )
        for key, cls in _PARTS.items()
    }
    return record(
        InstanceDetail,
        data,
        **parts,
        market_logs=tuple(data.get("market_logs") or ()),
        preflight=dict(data.get("preflight") or {}),
    )
