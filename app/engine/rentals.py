"""The one writer of a rental's lifecycle: `apply(journal, update)`.

What happened to a rental arrives as an update, a small value named for the event (`Listed`,
`Stopped`, `Lost`, ...). `apply` checks its move against the lifecycle's legal moves
(`core/lifecycle.py`), puts the next version of the rental's `Lifecycle` (an immutable record,
its `version` counted up) on the attempt, and writes the ledger event and the decision log's
line that the update carries, so a change and its event are one thing. An illegal move changes
no phase and is written down as an `error` event.

No other module assigns `Attempt.life` or calls the attempt methods an update stands for
(`tests/test_one_writer.py`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.lifecycle import Phase
from ..core.verdict import Verdict, detect_throttle
from ..ledger import EventKind

if TYPE_CHECKING:
    from .attempt import Attempt
    from .journal import Journal

K = EventKind
PRICE_SLACK = 1.01  # a billed price this much over the offer's (or the last seen) is flagged


@dataclass(frozen=True, slots=True)
class Listed:
    """The market lists a rental it was asked for: its image is on the way."""

    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class CameUp:
    """Its container runs (booted, or adopted running)."""

    a: Attempt
    at: float
    why: str = "container running"


@dataclass(frozen=True, slots=True)
class PreflightStarted:
    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class Verified:
    """In service: proven by its preflight, or trusted on sight (`by_preflight` False)."""

    a: Attempt
    at: float
    rule: str
    reason: str
    by_preflight: bool
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Resumed:
    """A bid rental that resumed by itself taken back into service (its proof stands)."""

    a: Attempt
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class Started:
    """Our start went through: it boots again."""

    a: Attempt
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class Stopped:
    """Our stop went through (its intent and outcome are the change's own events)."""

    a: Attempt
    at: float
    actor: str
    reason: str
    usd: float  # what it has cost so far, for the log line


@dataclass(frozen=True, slots=True)
class StoppedByMarket:
    """A stop nobody here asked for: a contract's end, a zero balance, an outbid."""

    a: Attempt
    at: float
    why: str
    said: str  # the market's intended/current/next states
    proven: bool  # a proven rental keeps its proof; an unproven one is the rules' to replace


@dataclass(frozen=True, slots=True)
class Destroyed:
    a: Attempt
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class GaveUp:
    """Given up before it proved itself: its destroy is due. `line`: the log's line, if any."""

    a: Attempt
    at: float
    actor: str
    reason: str
    failure_class: str
    detail: dict[str, Any] = field(default_factory=dict)
    line: str = ""


@dataclass(frozen=True, slots=True)
class Lost:
    """Gone from the market without our destroy."""

    a: Attempt
    at: float
    why: str


@dataclass(frozen=True, slots=True)
class Returned:
    """Listed again after its write-off: held again as `to`, billed as if never written off."""

    a: Attempt
    at: float
    to: Phase
    why: str
    detail: dict[str, Any]
    preflight_again: bool  # a finished preflight that proved nothing is run afresh


@dataclass(frozen=True, slots=True)
class Adopted:
    """Found on the market at a start (`engine/recovery.py`): where it stands now, and whether
    the ledger holds a passed preflight for it."""

    a: Attempt
    at: float
    status: str | None
    status_msg: str | None
    ssh_host: str | None
    ssh_port: int | None
    proven: bool
    stopped: bool


@dataclass(frozen=True, slots=True)
class RowSeen:
    """The market's row for it, as the poll reads it: its status, route and billed price."""

    a: Attempt
    at: float
    status: str | None
    status_msg: str | None
    ssh_host: str | None
    ssh_port: int | None
    gpu_dph: float
    changed_at: float  # when a change of status took effect (what the GPU is billed from)
    listed: bool  # in a list answer, or answered when asked: not unseen


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A list answer left it out: one more poll unseen (the first says so in the ledger)."""

    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class AnsweredUnread:
    """The market answered for it with a row it could not read: not unseen, not seen."""

    a: Attempt


@dataclass(frozen=True, slots=True)
class IdleSince:
    """Since when its GPU has been idle by the policy (None: busy), from a row or a sample."""

    a: Attempt
    since: float | None


@dataclass(frozen=True, slots=True)
class PreflightRunning:
    """Its preflight's task, started (`PreflightStarted` moves it to verifying first)."""

    a: Attempt
    task: asyncio.Task[Any]


@dataclass(frozen=True, slots=True)
class Tending:
    """Tended from now (in service again): silence counts from its next unanswered look."""

    a: Attempt
    task: asyncio.Task[Any]


@dataclass(frozen=True, slots=True)
class SshWaiting:
    """No try made (no port yet) or none answered yet: what the pane shows meanwhile."""

    a: Attempt
    why: str


@dataclass(frozen=True, slots=True)
class SshFailed:
    """A try that ended without the host's answer; `why` replaces the shown error."""

    a: Attempt
    why: str | None = None


@dataclass(frozen=True, slots=True)
class SshReached:
    a: Attempt


@dataclass(frozen=True, slots=True)
class ProbeAnswered:
    a: Attempt


@dataclass(frozen=True, slots=True)
class Judged:
    """The preflight's verdict, with the probe's document when it answered."""

    a: Attempt
    verdict: Verdict
    doc: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class WentSilent:
    """A session to its host got no answer (`Attempt.went_silent`)."""

    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class Answered:
    """A command on its host ran to its end (a connect alone is not an answer)."""

    a: Attempt


@dataclass(frozen=True, slots=True)
class KeyChanged:
    """Its SSH host key changed after it was pinned: distrusted for good (said once)."""

    a: Attempt
    why: str


@dataclass(frozen=True, slots=True)
class WatchdogSeen:
    """Armed on the host; False: a heartbeat found it gone."""

    a: Attempt
    armed: bool


@dataclass(frozen=True, slots=True)
class Broken:
    """The tender saw this proven host break (a fatal XID): the next poll's rules stop it."""

    a: Attempt
    rule: str
    reason: str
    failure_class: str
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Sampled:
    """The sampler's readings (already in the ledger's samples): the idle and throttle
    evidence they carry."""

    a: Attempt
    at: float
    rows: list[dict[str, Any]]
    idle_since: float | None
    idle_known: bool  # the first reading had a utilisation
    throttle_ratio: float


Update = (
    PreflightRunning
    | Tending
    | SshWaiting
    | SshFailed
    | SshReached
    | ProbeAnswered
    | Judged
    | WentSilent
    | Answered
    | KeyChanged
    | WatchdogSeen
    | Broken
    | Sampled
    | RowSeen
    | LeftOut
    | AnsweredUnread
    | IdleSince
    | Listed
    | CameUp
    | PreflightStarted
    | Verified
    | Resumed
    | Started
    | Stopped
    | StoppedByMarket
    | Destroyed
    | GaveUp
    | Lost
    | Returned
    | Adopted
)


def apply(j: Journal, u: Update) -> bool:
    """Apply one update to its rental: its lifecycle's next version, the attempt's fields the
    event changes, its ledger event and its log line. False when a move it asked for was
    illegal (refused, and written down as an error)."""
    a = u.a
    ok = True
    version = a.life.version
    match u:
        case PreflightRunning():
            a.preflight_running(u.task)
        case Tending():
            a.tended_by(u.task)
        case SshWaiting():
            a.ssh_waiting(u.why)
        case SshFailed():
            a.ssh_failed(u.why)
        case SshReached():
            a.ssh_reached()
        case ProbeAnswered():
            a.probe_answered()
        case Judged():
            a.judged(u.verdict, u.doc)
        case WentSilent():
            a.went_silent(u.at)
        case Answered():
            a.answered()
        case KeyChanged():
            if a.key_changed(u.why):
                j.fact(K.HOST_KEY_CHANGED, a, actor="engine", reason=u.why, ok=False)
                j.say(f"distrust i:{a.instance_id} m:{a.machine_id}: {u.why}")
        case WatchdogSeen():
            a.watchdog_seen(u.armed)
        case Broken():
            j.fact(K.XID, a, actor=u.rule, ok=False, reason=u.reason, detail=u.detail)
            j.say(f"xid    i:{a.instance_id} m:{a.machine_id}: {u.reason}")
            a.found_broken(u.rule, u.reason, u.failure_class)
        case Sampled():
            _sampled(j, u)
        case RowSeen():
            _row_seen(j, u)
        case LeftOut():
            if a.left_out() == 1:
                j.fact(
                    K.UNSEEN,
                    a,
                    at=u.at,
                    actor="engine",
                    reason="left out of the market's list answer: still held, asked for directly",
                )
        case AnsweredUnread():
            a.answered_unread()
        case IdleSince():
            a.util_seen(u.since)
        case Listed():
            ok = _move(j, a, Phase.BOOTING, u.at, "listed by the marketplace")
        case CameUp():
            a.came_up(u.at)
            ok = _move(j, a, Phase.RUNNING, u.at, u.why)
        case PreflightStarted():
            if a.life.phase == Phase.RUNNING:
                ok = _move(j, a, Phase.VERIFYING, u.at, "preflight started")
        case Verified():
            ok = _move(j, a, Phase.VERIFIED, u.at, u.reason)
            a.verified(u.at)
            if u.by_preflight:
                a.life = a.life.with_proof(True)
            j.fact(
                K.PREFLIGHT_PASSED,
                a,
                at=u.at,
                actor=u.rule,
                reason=u.reason,
                ok=True,
                detail={"by_preflight": u.by_preflight, **u.detail},
            )
            j.say(f"verify i:{a.instance_id} m:{a.machine_id} {a.gpu_name}: {u.reason}")
        case Resumed():
            a.back_in_service(u.at)
            j.say(f"resume i:{a.instance_id} back in service: {u.reason}")
            ok = _move(j, a, Phase.VERIFIED, u.at, u.reason)
        case Started():
            ok = _move(j, a, Phase.BOOTING, u.at, u.reason)
            a.started(u.at)
        case Stopped():
            a.stopped_ourselves(u.actor)
            ok = _move(j, a, Phase.STOPPED, u.at, u.reason)
            j.say(
                f"stop   i:{a.instance_id} m:{a.machine_id} by {u.actor}: {u.reason} "
                f"(${u.usd:.4f} so far)"
            )
        case StoppedByMarket():
            a.mark(u.at, "stop")
            j.fact(
                K.STOP,
                a,
                at=u.at,
                actor="market",
                ok=True,
                reason=u.why,
                detail={"by": "market"},
            )
            ok = _move(j, a, Phase.STOPPED, u.at, u.why)
            j.say(f"stop   i:{a.instance_id} m:{a.machine_id} by the market: {u.said}")
            a.left_by_market()  # its job, if any, goes back to the queue at no retry's cost
            if not u.proven:  # never proven: nothing to keep, its disk bills on
                a.stopped_by_market(u.why)
        case Destroyed():
            ok = _move(j, a, Phase.DESTROYED, u.at, u.reason)
        case GaveUp():
            a.abandoned_as(u.failure_class)
            ok = _move(j, a, Phase.ABANDONED, u.at, u.reason)
            j.fact(
                K.ABANDON,
                a,
                at=u.at,
                actor=u.actor,
                reason=u.reason,
                detail={"class": u.failure_class, **u.detail},
            )
            if u.line:
                j.say(u.line)
        case Lost():
            ok = _move(j, a, Phase.LOST, u.at, u.why)
            a.mark(u.at, "destroy")
            j.fact(
                K.LOST,
                a,
                at=u.at,
                actor="engine",
                ok=True,
                reason=f"instance gone without our destroy: {u.why}",
            )
            j.say(f"lost   i:{a.instance_id} m:{a.machine_id}: {u.why}")
        case Returned():
            a.unwritten_off()
            if u.preflight_again:
                a.preflight_again()
            ok = _move(j, a, u.to, u.at, u.why)
            j.fact(
                K.RETURNED,
                a,
                at=u.at,
                actor="engine",
                ok=True,
                reason=f"{u.why}: held again as {u.to}, billed as if never written off",
                detail=u.detail,
            )
            j.say(f"back   i:{a.instance_id} m:{a.machine_id}: {u.why}; held again ({u.to})")
        case Adopted():
            ok = _move(j, a, Phase.BOOTING, u.at, "adopted")
            a.found(u.status, u.status_msg, u.ssh_host, u.ssh_port, u.at)
            a.life = a.life.with_proof(u.proven)
            if u.status == "running":
                ok = _move(j, a, Phase.RUNNING, u.at, "adopted running") and ok
                a.came_up(u.at)
                if u.proven:
                    why = "adopted, verified before the restart"
                    ok = _move(j, a, Phase.VERIFIED, u.at, why) and ok
            if u.stopped:
                ok = _move(j, a, Phase.STOPPED, u.at, "adopted stopped") and ok
    if a.life.version == version:
        a.life = a.life.bumped()
    return ok


def _sampled(j: Journal, u: Sampled) -> None:
    a = u.a
    a.sampled(u.rows)
    if u.idle_known:
        a.util_seen(u.idle_since)
    t = detect_throttle(a.samples[-10:], u.throttle_ratio)
    if t.throttled and not (a.throttle and a.throttle.throttled):
        j.fact(
            K.THROTTLE,
            a,
            at=u.at,
            actor="engine",
            reason=t.reason,
            detail={"slowdown": t.slowdown, "reasons": list(t.reasons)},
        )
        j.say(f"throttle i:{a.instance_id} m:{a.machine_id}: {t.reason}")
    a.throttle_seen(t)


def _row_seen(j: Journal, u: RowSeen) -> None:
    a, now, status = u.a, u.at, u.status
    if u.listed:
        a.listed()
    if u.gpu_dph > max(a.dph_seen, a.gpu_dph) * PRICE_SLACK and a.gpu_dph > 0:
        j.fact(
            K.NOTE,
            a,
            at=now,
            actor="engine",
            ok=False,
            reason=f"billed price ${u.gpu_dph:.4f}/h contradicts the offer's "
            f"${a.gpu_dph:.4f}/h: the budget counts the higher one",
            detail={"dph_seen": u.gpu_dph, "dph_offer": a.gpu_dph},
        )
        j.say(f"price  i:{a.instance_id} billed ${u.gpu_dph:.4f}/h, offer said ${a.gpu_dph:.4f}/h")
    a.billed_at(u.gpu_dph)
    if status != a.status:
        changed = u.changed_at
        j.fact(
            K.STATUS,
            a,
            at=changed,
            actor="engine",
            reason=f"status {a.status or 'none yet'} -> {status}",
            detail={"status": status, "msg": (u.status_msg or "")[:300]},
        )
        # billing marks as Vast bills: nothing while offline (neither GPU nor storage)
        if a.status == "offline" and status not in ("offline", "stopped"):
            a.mark(changed, "online")  # the host answers again
        gpu_on = ("running", "frozen")  # frozen: "GPU charges apply" (Vast's show-instance)
        if status in gpu_on and a.status not in gpu_on:
            a.mark(changed, "running")
        elif status == "offline":
            a.mark(now, "offline")
        elif a.status == "running" and status in ("exited", "unknown"):
            a.mark(now, "halt")
    a.status_seen(status, u.status_msg, now)
    a.routed(u.ssh_host, u.ssh_port)


def _move(j: Journal, a: Attempt, to: Phase, at: float, why: str) -> bool:
    """Move `a` through its lifecycle; an illegal move is written down as an error."""
    a.life = a.life.moved(to, at, why)
    if a.life.phase == to:
        return True
    t = a.life.refused[-1]
    j.fact(
        K.ERROR,
        a,
        actor="engine",
        at=at,
        ok=False,
        reason=f"illegal lifecycle move {t.before} -> {t.after} refused ({why})",
        detail={"before": str(t.before), "after": str(t.after), "why": why},
    )
    j.say(f"error  i:{a.instance_id} refused {t.before} -> {t.after}: {why}")
    return False
