"""The one writer of a rental's state: `apply(journal, update)`.

An update (`engine/updates.py`) is checked against the lifecycle's legal moves, puts the next
version of the `Lifecycle` and the other fields the event changes on the attempt, and writes its
ledger event and log line, so a change and its event are one thing. `apply` never awaits, so each
update lands whole between two awaits (`tests/test_one_writer.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.lifecycle import Phase
from ..core.preflight.verdict import detect_throttle
from ..ledger import EventKind
from .updates import (
    Adopted,
    Answered,
    AnsweredUnread,
    BidChanged,
    BidFloorSeen,
    BidRestored,
    Broken,
    CameUp,
    ChangeTookEffect,
    DeadlinesFrom,
    Destroyed,
    FoundChanged,
    GaveUp,
    HandedOver,
    IdleSince,
    IncreaseAccepted,
    JobSaid,
    Judged,
    KeyChanged,
    LeftOut,
    Listed,
    LookedAt,
    Lost,
    OurStopKept,
    Outbid,
    OutbidAgain,
    PreflightRunning,
    PreflightStarted,
    ProbeAnswered,
    RebidTried,
    Replayed,
    Repriced,
    RestartRefused,
    Resumed,
    ResumedItself,
    Returned,
    RowSeen,
    RowUnread,
    Said,
    Sampled,
    SshFailed,
    SshReached,
    SshWaiting,
    Started,
    Stopped,
    StoppedByMarket,
    Tending,
    Touched,
    Update,
    Verified,
    WatchdogSeen,
    WentSilent,
)

if TYPE_CHECKING:
    from .attempt import Attempt
    from .journal import Journal

K = EventKind
PRICE_SLACK = 1.01  # a billed price this much over the offer's (or the last seen) is flagged


def apply(j: Journal, u: Update) -> bool:
    """Apply one update to its rental. False when its move was illegal (refused, written down)."""
    a = u.a
    ok = True
    version = a.life.version
    match u:
        case ChangeTookEffect():
            a.mark(u.at, u.kind)
        case FoundChanged():
            _write(j, a, u.event)
            a.mark(u.event.at, str(u.event.kind))
        case Replayed():
            a.marked(u.marks)
            if u.price is not None:
                a.price_known(u.price)
        case RestartRefused():
            a.restart_refused()
        case DeadlinesFrom():
            a.deadlines_from(u.at)
        case Touched():
            a.touched(u.at, u.act)
        case HandedOver():
            a.handed_over(u.at)
        case LookedAt():
            a.looked_at()
        case JobSaid():
            a.job_said(u.line)
        case OurStopKept():
            a.stopped_ourselves(u.actor)
        case IncreaseAccepted():
            a.increase_accepted(u.at, u.price, u.pending_id)
        case Repriced():
            old = a.gpu_dph
            a.repriced(u.at, u.price)
            j.fact(
                K.PRICE,
                a,
                at=u.at,
                actor="market",
                ok=True,
                reason=f"the host's increase accepted: ${old:.4f}/h -> ${u.price:.4f}/h from "
                "its contract's end date",
                detail={"price": u.price, "old": old, "pending_id": u.pending_id},
            )
            j.say(
                f"price  i:{a.instance_id} ${old:.4f} -> ${u.price:.4f}/h from the contract's end"
            )
        case BidRestored():
            a.bid_held(u.bid, u.bid_floor, u.ours, u.paused_at, u.rebid)
            if u.paused_unproven:
                a.stopped_by_market("found paused on the tier before it was proven")
        case BidFloorSeen():
            a.bid_floor_seen(u.bid_floor)
        case Outbid():
            a.outbid(u.event.at, u.bid_floor)
            _write(j, a, u.event)
        case ResumedItself():
            a.resumed_itself()
            a.mark(u.event.at, "resume")
            _write(j, a, u.event)
        case OutbidAgain():
            a.mark(u.at, "stop")
            j.fact(
                K.STOP, a, at=u.at, actor="market", ok=True, reason="outbid again after its resume"
            )
        case RebidTried():
            a.rebid_tried()
        case BidChanged():
            a.rebid_to(u.price, u.event.at)
            _write(j, a, u.event)
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
        case RowUnread():
            _row_unread(j, u)
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


def _write(j: Journal, a: Attempt, e: Said) -> None:
    j.fact(e.kind, a, at=e.at, actor=e.actor, ok=True, reason=e.reason, detail=e.detail)
    if e.line:
        j.say(e.line)


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
    if a.row_read(now):  # after its status's marks: they may date from before now
        j.fact(
            K.READ_AGAIN,
            a,
            at=now,
            actor="engine",
            reason="its row read well again: billed as it reads from here",
        )


def _row_unread(j: Journal, u: RowUnread) -> None:
    """Billed as running (its last price) and online from its last good read: what the market
    may bill for it while rentwatch cannot read its row, never less."""
    a = u.a
    since = a.row_unread()
    if since is None:
        return
    j.fact(
        K.UNREAD,
        a,
        at=since,
        actor="engine",
        reason=f"its row is unreadable ({u.problem}): billed as running, its GPU at its last "
        "price, plus storage, from its last good read until it reads well again",
        detail={"seen_at": u.at, "problem": u.problem[:200]},
    )


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
