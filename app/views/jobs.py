"""A campaign's jobs as the operator reads them (`rentwatch jobs`, the jobs screen): live from the
engine, or folded from the ledger as the engine's restore reads them. A job's dollars are what
its hosts billed while it ran there, by the receipt's billing rules."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.decisions import fmt_span
from ..core.errors import RentwatchError
from ..core.lifecycle import Phase
from ..core.records import record
from ..core.text import clean
from ..ledger.job_reads import job_events
from ..ledger.kinds import EventKind

if TYPE_CHECKING:  # the engine (asyncssh) is imported only where a controller runs it
    from ..engine.supervisor import Supervisor


@dataclass(frozen=True)
class JobRow:
    job: str
    state: str  # pending, running, finishing (its output coming off), done, failed
    instance_id: int | None  # its host now, or the last one it ran on
    host: str  # that host's GPU and machine ("" before its first start)
    progress: float | None  # 0..1: the job's own reading, 1 once done; None: nothing says
    eta_min: float | None  # market minutes left (None: nothing says)
    usd: float  # what its hosts billed while it ran on them
    attempts: int
    started_at: float | None = None  # this attempt's start (market time)
    finished_at: float | None = None
    exit_code: int | None = None
    last_line: str = ""  # the last line of its output rentwatch saw
    eta_estimated: bool = False  # the ETA comes from the preflight's speed, not its progress


def progress_bar(frac: float, width: int = 20) -> str:
    """A bar of `width` cells for a fraction done (eighths within the last cell)."""
    frac = max(0.0, min(1.0, frac))
    eighths = int(frac * width * 8)
    full, part = divmod(eighths, 8)
    bar = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part and full < width else "")
    return bar + " " * (width - len(bar))


def cells(r: JobRow) -> tuple[str, ...]:
    """One job as the jobs table's cells, `rentwatch jobs`' and the jobs screen's; '-' where
    nothing says, and for the time left of a job that is over."""
    progress = "-" if r.progress is None else f"{progress_bar(r.progress, 10)} {r.progress:4.0%}"
    eta = (
        "-"
        if r.eta_min is None or r.state in ("done", "failed")
        else f"{'~' if r.eta_estimated else ''}{fmt_span(r.eta_min * 60)}"
    )
    host = f"i:{r.instance_id} {clean(r.host, 40)}" if r.instance_id is not None else "-"
    return (clean(r.job, 64), r.state, host, progress, eta, f"${r.usd:.4f}", str(r.attempts))


@dataclass(frozen=True)
class Span:
    """One run of a job on one host: from its start to its end (None: running still)."""

    instance_id: int
    start: float
    end: float | None


@dataclass
class _Fold:
    state: str = "pending"
    instance_id: int | None = None
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    last_line: str = ""
    spans: list[Span] = field(default_factory=list)


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def fold(events: Iterable[Mapping[str, Any]], names: Sequence[str] = ()) -> dict[str, _Fold]:
    """Each job's state from its starts and ends, oldest first: a start runs it; an end that queued
    it again leaves it pending; any other end settles it. `names`: never started."""
    jobs: dict[str, _Fold] = {n: _Fold() for n in names}
    for ev in events:
        name = str(ev["job"])
        j = jobs.setdefault(name, _Fold())
        at = float(ev["ts"])
        if ev["kind"] == "job_started":
            iid = _int(ev["instance_id"])
            j.state, j.instance_id, j.started_at = "running", iid, at
            j.finished_at, j.exit_code = None, None
            j.attempts = _int(ev["attempt"]) or j.attempts + 1
            if iid is not None:
                j.spans.append(Span(iid, at, None))
            continue
        if j.spans and j.spans[-1].end is None:
            j.spans[-1] = Span(j.spans[-1].instance_id, j.spans[-1].start, at)
        if str(ev["requeued"]).lower() in ("true", "1"):
            j.state = "pending"
            continue
        code = _int(ev["exit_code"])
        if code is None and not ev["ok"] and j.state != "running":
            continue  # an interruption after its end was recorded (out of retries, say)
        j.exit_code = code if code is not None else j.exit_code
        j.state = "done" if ev["ok"] else "failed"
        j.finished_at = at
        tail = [ln for ln in str(ev.get("log_tail") or "").splitlines() if ln.strip()]
        if tail:
            j.last_line = clean(tail[-1], 200)
    return jobs


def span_usd(
    spans: Iterable[Span], billed: Mapping[int, Sequence[Mapping[str, Any]]], now: float
) -> float:
    """What the spans' hosts billed during them, from the ledger's billing spans per instance
    (`ledger.job_reads.billing_spans` rows): each overlap at the rates that span bills."""
    total = 0.0
    for s in spans:
        end = now if s.end is None else s.end
        for b in billed.get(s.instance_id, ()):
            lo = max(s.start, float(b["ts"]))
            hi = min(end, float(b["ts"]) + float(b["span_s"]))
            if hi <= lo:
                continue
            rate = (float(b["gpu_dph"]) if b["gpu_on"] else 0.0) + (
                float(b["storage_dph"]) if b["storage_on"] else 0.0
            )
            total += (hi - lo) * rate / 3600
    return total


# what a row copies of a job's run, as the ledger's fold or the engine's queue holds it
_RUN = "instance_id attempts started_at finished_at exit_code"


def host_label(gpu_name: Any, machine_id: Any) -> str:
    gpu = clean(gpu_name, 40) if gpu_name else "?"
    return f"{gpu} m:{machine_id}" if machine_id is not None else gpu


def rows_from_ledger(
    folded: Mapping[str, _Fold],
    billed: Mapping[int, Sequence[Mapping[str, Any]]],
    hosts: Mapping[int, Mapping[str, Any]],
    now: float,
) -> list[JobRow]:
    """The ledger's jobs as rows (no live delivery: progress is 1 once done, else unknown)."""
    out = []
    for name, j in folded.items():
        h = hosts.get(j.instance_id) if j.instance_id is not None else None
        # a running job whose host is gone from the ledger's view is not running any more
        state = j.state
        if state == "running" and h is not None and h.get("destroyed_at") is not None:
            state = "failed"
        out.append(
            JobRow(
                job=clean(name, 64),
                state=state,
                **{name: getattr(j, name) for name in _RUN.split()},
                host=host_label(h.get("gpu_name"), h.get("machine_id")) if h else "",
                progress=1.0 if state == "done" else None,
                eta_min=0.0 if state == "done" else None,
                usd=round(span_usd(j.spans, billed, now), 6),
                last_line=j.last_line,
            )
        )
    return out


def live(sup: Supervisor) -> list[JobRow]:
    """The campaign's jobs as the engine holds them now. Runs on the engine's loop."""
    now = sup.now()
    mode = sup.market.gpu_billing
    # the ledger's read that `rentwatch jobs` folds too
    spans = fold(sup.ledger.query(job_events(sup.campaign.name), 1 << 40).as_dicts())
    out = []
    for j in sup.jobs.jobs:
        a = sup.attempts.get(j.instance_id) if j.instance_id is not None else None
        usd = 0.0
        for s in spans.get(j.name, _Fold()).spans:
            held = sup.attempts.get(s.instance_id)
            if held is not None:
                end = now if s.end is None else s.end
                usd += held.charges(mode, end).total_usd - held.charges(mode, s.start).total_usd
        d = j.delivery if j.status == "running" else None
        progress = 1.0 if j.status == "done" else (d.progress if d else j.progress)
        eta = 0.0 if j.status == "done" else (d.eta_s / 60 if d and d.eta_s is not None else None)
        out.append(
            JobRow(
                job=clean(j.name, 64),
                state=j.status,
                **{name: getattr(j, name) for name in _RUN.split()},
                host=host_label(a.gpu_name, a.machine_id) if a is not None else "",
                progress=progress,
                eta_min=eta,
                usd=round(max(0.0, usd), 6),
                last_line=clean(a.job_line, 200) if a is not None and j.status == "running" else "",
                eta_estimated=bool(d and d.source != "progress"),
            )
        )
    return out


def names_of(raw: Any) -> list[str]:
    """A campaign start's job list (`detail.jobs`, JSON text from SQL); none if unreadable."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return []
    return [str(n) for n in value] if isinstance(value, list) else []


def from_json(data: Any) -> list[JobRow]:
    """Rows from the controller's answer; a field this version lacks is left out."""
    rows = data if isinstance(data, list) else []
    return [record(JobRow, row) for row in rows if isinstance(row, dict)]


# -- a job's output -------------------------------------------------------------------------
class NoSuchJob(RentwatchError):
    title = "no such job"


@dataclass(frozen=True)
class JobOutput:
    job: str
    text: str  # the host's bytes, decoded; not cleaned
    source: str  # where it came from, as a person reads it
    live: bool  # read off its host now: a follow asks again


async def read_output(sup: Supervisor, name: str) -> JobOutput:
    """The job's output now: off its host while it runs on a rental in service, else the log
    kept at its end (once this ledger records that end), else the tail of its last end in the
    ledger."""
    from ..engine.hosts.ssh import SSHFailure
    from ..engine.jobs.output import log_command, log_path, read_kept

    job = sup.jobs.by_name(name)
    if job is None:
        raise NoSuchJob(f"the campaign {sup.campaign.name} has no job {name!r}")
    a = sup.attempts.get(job.instance_id) if job.instance_id is not None else None
    if (
        job.status in ("running", "finishing")
        and a is not None
        and a.life.phase == Phase.VERIFIED
        and a.ssh_host is not None
    ):
        try:
            res = await sup.link.run(a, log_command(job.job))
            text = res.stdout.decode("utf-8", errors="replace")
            return JobOutput(name, text, f"its host i:{a.instance_id}", True)
        except SSHFailure as exc:
            said = f"its host i:{a.instance_id} did not answer ({exc})"
            return JobOutput(name, "", said, True)
    ends = [
        e
        for e in sup.ledger.campaign_events(sup.campaign.name, EventKind.JOB_FINISHED)
        if e.detail.get("job") == name
    ]
    # the artifacts folder is the campaign name's, whichever ledger ran it: a log there is this
    # run's only once this ledger records the job's end (a requeued end keeps no log)
    if any(not e.detail.get("requeued") for e in ends):
        kept = read_kept(log_path(sup.job_work.pulls.artifacts_root, sup.campaign.name, name))
        if kept is not None:
            return JobOutput(name, kept, "the log kept when it ended", False)
    tail = next(
        (str(e.detail.get("log_tail") or "") for e in reversed(ends) if e.detail.get("log_tail")),
        None,
    )
    if tail is not None:
        return JobOutput(name, tail, "the tail its end left in the ledger", False)
    said = (
        "not started yet" if job.attempts == 0 else "no output kept: it was not pulled off its host"
    )
    return JobOutput(name, "", said, job.status == "pending")


def output_from_json(got: Any, name: str) -> JobOutput:
    """A job's output from the controller's answer."""
    got = got if isinstance(got, dict) else {}
    text, source = str(got.get("text", "")), str(got.get("source", ""))
    return JobOutput(str(got.get("job", name)), text, source, bool(got.get("live")))
