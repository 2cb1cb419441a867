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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.lifecycle import Phase
from ..ledger import EventKind

if TYPE_CHECKING:
    from .attempt import Attempt
    from .journal import Journal

K = EventKind


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


Update = (
    Listed
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
    match u:
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
    return ok


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
