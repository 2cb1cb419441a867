"""How late the engine noticed what its hosts did: each run's lag, and whether it is valid. A host's
event is dated by the simulator's truth, its notice by the engine; an unnoticed event counts its
age only while the engine could still see it. Pure (docs/referee.md, "Lag")."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.lifecycle import Phase
from ..sim.truth import running
from .score import RunFacts

# market seconds a run's lag may reach (its max) before the run is invalid: a few polls at the
# default 10 s interval, plus a job check's round trip
LAG_BOUND_S = 120.0
# market seconds by which an engine's stamp may precede the truth's time of the same event: a
# poll's answer is stamped as the market starts to serve it, the row's status a moment later
STAMP_SLACK_S = 30.0

_BEFORE_RUNNING = frozenset({Phase.REQUESTED, Phase.BOOTING})
_GONE = frozenset({Phase.STOPPED, Phase.ABANDONED, Phase.DESTROYED, Phase.LOST})


@dataclass(frozen=True)
class HostEvent:
    kind: str  # "boot", "stop" or "job_exit"
    instance_id: int
    at: float  # market time, the truth's
    job: str | None = None


def host_events(truth: Mapping[str, Any], start: float, until: float) -> list[HostEvent]:
    """The events of the run's own instances (created from `start`) up to `until`."""
    ours = {int(r["id"]): r for r in truth.get("instances", []) if float(r["created_at"]) >= start}
    events: list[HostEvent] = []
    for iid, r in ours.items():
        if r.get("running_at") is not None:
            events.append(HostEvent("boot", iid, float(r["running_at"])))
        stops = list(r.get("outbid_at") or [])
        if r.get("market_stopped_at") is not None:
            stops.append(r["market_stopped_at"])
        events += [HostEvent("stop", iid, float(t)) for t in stops]
    for j in truth.get("jobs", []):
        if j.get("done_at") is not None and int(j["instance_id"]) in ours:
            events.append(
                HostEvent("job_exit", int(j["instance_id"]), float(j["done_at"]), j["job"])
            )
    return sorted((e for e in events if e.at <= until), key=lambda e: e.at)


def _phase_at(moves: Iterable[tuple[float, Phase]], at: float) -> Phase | None:
    phase = None
    for t, p in moves:
        if t > at:
            break
        phase = p
    return phase


def noticed_at(event: HostEvent, facts: RunFacts) -> float | None:
    """When the engine noticed `event` (None: not yet, or it let the rental go first)."""
    if event.kind == "job_exit":
        assert event.job is not None
        return facts.jobs_done.get((event.job, event.instance_id))
    moves = facts.moves.get(event.instance_id, ())
    after = event.at - STAMP_SLACK_S
    if event.kind == "boot":
        return next((t for t, p in moves if p not in _BEFORE_RUNNING and t >= after), None)
    if _phase_at(moves, event.at) in _GONE:
        return event.at  # already let go by the engine: nothing to notice
    return next((t for t, p in moves if p in _GONE and t >= after), None)


def still_visible(event: HostEvent, row: Mapping[str, Any] | None) -> bool:
    """Whether the engine could still notice an event it has not: its instance is still in
    the state the event put it in (running after a boot or a job's end, stopped after a stop)."""
    if row is None or row.get("destroyed_at") is not None:
        return False
    up = running(row)
    return not up if event.kind == "stop" else up


def lags(truth: Mapping[str, Any], facts: RunFacts) -> list[float]:
    """Market seconds from each event of the run to its notice; an event still unnoticed but
    visible counts with its age at the run's end (it was at least that late)."""
    rows = {int(r["id"]): r for r in truth.get("instances", [])}
    now = facts.finish
    out: list[float] = []
    for e in host_events(truth, facts.start, now):
        seen = noticed_at(e, facts)
        if seen is not None:
            out.append(max(0.0, seen - e.at))
        elif still_visible(e, rows.get(e.instance_id)):
            out.append(now - e.at)
    return out


def timing(
    facts: RunFacts, truth: Mapping[str, Any], bound_s: float, pace: float
) -> dict[str, Any]:
    """A run's `lag_s` (`{"median", "max", "events"}` in market seconds, null with no event),
    `valid` (a run whose lag max passed `bound_s` is not scored silently), `why` not, and
    `time_scale`: `pace` market seconds passed per wall second of the box (for reading: a
    stepped market's pace follows the box, its times do not)."""
    values = lags(truth, facts)
    worst = round(max(values), 1) if values else None
    median = round(statistics.median(values), 1) if values else None
    out: dict[str, Any] = {
        "lag_s": {"median": median, "max": worst, "events": len(values)},
        "valid": worst is None or worst <= bound_s,
        "time_scale": {"effective": pace},
    }
    if not out["valid"]:
        out["why"] = (
            f"the engine noticed a host's event {worst:.0f} market s late (bound {bound_s:g} s)"
        )
    return out
