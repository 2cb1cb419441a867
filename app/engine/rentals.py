"""The one writer of a rental's state: `apply(journal, update)`, and `Writer`, the one queue every
update goes through to it.

An update (`engine/updates.py`) is checked against the lifecycle's legal moves, puts the next
version of the `Lifecycle` and the other fields the event changes on the attempt, and writes its
ledger event and log line, so a change and its event are one thing. `apply` never awaits, so each
update lands whole between two awaits (`tests/test_one_writer.py`).

While the poll loop runs (`rounds`, inside `Writer.writing`), its task is the only one that
applies: an update emitted on it is applied at once, after whatever was queued before it; one a
host task emits (preflight, tending, the SSH link, a job) is queued, the loop's wait wakes, and
the poll's task applies the queue in order. A person's intent is run on the poll's task too,
between two polls (`Writer.run`). With no poll loop running (before the first poll, at the end's
release, `rentwatch end` on a bare session) nothing runs beside the caller: an update is applied
where it is emitted (`tests/test_writer_queue.py`)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.billing import Mark
from ..core.lifecycle import Phase
from ..core.preflight.verdict import detect_throttle
from ..ledger import EventKind
from . import updates as up
from .attempt import Attempt
from .updates import Said, Update

if TYPE_CHECKING:
    from .journal import Journal

K = EventKind
T = TypeVar("T")
PRICE_SLACK = 1.01  # a billed price this much over the offer's (or the last seen) is flagged
SAMPLES_KEPT = 120
# what `Set` may not touch: its identity, and what only the updates named for it move
SETTABLE = {f.name for f in dataclasses.fields(Attempt)} - {"instance_id", "life", "marks"}


class Writer:
    """The queue of one supervisor's updates, and the task that applies them (above)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.queued: deque[Update] = deque()
        self.errands: deque[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any]]] = deque()
        self.task: asyncio.Task[Any] | None = None  # the poll loop's, while it runs
        self.arrived = asyncio.Event()  # something queued since the poll's task last looked
        self.settling: set[asyncio.Task[None]] = set()  # errands left when the loop ended
        self.deputies: set[asyncio.Task[Any]] = set()  # the poll's own work in a task (`spawn`)

    def here(self) -> bool:
        """Whether the caller may apply now: it is the poll's task, or no poll loop runs."""
        if self.task is None:
            return True
        with contextlib.suppress(RuntimeError):  # no running loop: nothing runs beside us
            now = asyncio.current_task()
            return now is self.task or now in self.deputies
        return True

    def spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """`work` in a task of its own (a create, whose answer must land even when the poll
        that asked is cancelled) that writes as its caller does: the poll's work on the poll's
        behalf, a host task's queued."""
        task = asyncio.ensure_future(work)
        if self.task is not None and self.here():
            self.deputies.add(task)
            task.add_done_callback(self.deputies.discard)
        return task

    def emit(self, u: Update) -> None:
        """Hand `u` to the writer: applied now on the poll's task, else queued for it."""
        if self.here():
            self.drain()
            apply(self.journal, u)
        else:
            self.queued.append(u)
            self.arrived.set()

    def drain(self) -> None:
        """Apply what was queued, in the order it was emitted (on the poll's task)."""
        assert self.here(), "only the poll's task applies queued updates"
        while self.queued:
            apply(self.journal, self.queued.popleft())

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """`work()` on the poll's task, between two polls (at once where no poll loop runs)."""
        if self.here():
            return await work()
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self.errands.append((work, done))
        self.arrived.set()
        return await done

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """The current task (the poll loop's) applies every update until the block ends; then
        what is left is applied, and the errands left run, where they were handed over."""
        self.task = asyncio.current_task()
        try:
            yield
        finally:
            self.task = None
            self.drain()
            for work, done in self.errands:
                if not done.done():
                    t = asyncio.ensure_future(_settle(work, done))
                    self.settling.add(t)
                    t.add_done_callback(self.settling.discard)
            self.errands.clear()

    async def wait(
        self,
        end: float,
        now: Callable[[], float],
        wake: asyncio.Event | None,
        until: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Until `now()` reaches `end` or an errand ends the loop (`until()`): False; or `wake` is
        set: True. The updates and errands other tasks hand over meanwhile are taken as each
        arrives."""
        while True:
            self.drain()
            ran = bool(self.errands)  # what `run` handed over, in order
            while self.errands:
                work, done = self.errands.popleft()
                if not done.done():  # (done: its caller gave up before it started)
                    await _settle(work, done)
            if ran and until():
                return False
            if wake is not None and wake.is_set():
                return True
            left = end - now()
            if left <= 0:
                return False
            if self.queued or self.errands:
                continue  # handed over while an errand ran
            self.arrived.clear()
            waits = [asyncio.ensure_future(self.arrived.wait())]
            if wake is not None:
                waits.append(asyncio.ensure_future(wake.wait()))
            try:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()


async def _settle(work: Callable[[], Awaitable[Any]], done: asyncio.Future[Any]) -> None:
    """`work()`'s result or error on `done`, as if its caller had run it itself."""
    try:
        result = await work()
    except asyncio.CancelledError:
        done.cancel()
        raise
    except Exception as exc:
        if not done.done():
            done.set_exception(exc)
    else:
        if not done.done():
            done.set_result(result)


def apply(j: Journal, u: Update) -> bool:
    """Apply one update to its rental. False when its move was illegal (refused, written down)."""
    a = u.a
    ok = True
    version = a.life.version
    match u:
        case up.Set():
            if refused := sorted(u.fields.keys() - SETTABLE):
                raise ValueError(f"a rental's {', '.join(refused)} not set by name")
            for name, value in u.fields.items():
                setattr(a, name, value)
        case up.ChangeTookEffect():
            _mark(a, u.at, u.kind)
        case up.FoundChanged():
            _write(j, a, u.event)
            _mark(a, u.event.at, str(u.event.kind))
        case up.Replayed():
            # in time order as the ledger's view reads them (an `unread` is dated at the last
            # good read, before the poll that wrote it)
            for m in u.marks:
                bisect.insort(a.marks, m, key=attrgetter("at"))
            if u.price is not None:
                _priced(a, u.price)
        case up.HandedOver():
            # its deadlines, freeze window and idle grace count from now (its status line may
            # have stood still for longer while only observed)
            a.owned = True
            a.clock_from = a.status_since = u.at
            if a.running_at is not None:
                a.running_at = u.at
            if a.util_low_since is not None:
                a.util_low_since = u.at
        case up.Repriced():
            old = a.gpu_dph
            a.price_due = None
            _priced(a, u.price, u.at)
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
        case up.BidRestored():
            a.bid, a.bid_floor, a.stopped_by_us, a.outbid_at = (
                u.bid,
                u.bid_floor,
                u.ours,
                u.paused_at,
            )
            if u.rebid is not None:  # a raise remembers the create's bid
                a.raised_from = u.bid if u.rebid > u.bid else None
                a.bid = a.gpu_dph = u.rebid
            if u.paused_unproven:
                a.market_stop = "found paused on the tier before it was proven"
        case up.Outbid():
            a.outbid_at, a.resumed = u.event.at, False
            a.bid_floor = u.bid_floor or a.bid_floor
            _write(j, a, u.event)
        case up.ResumedItself():
            a.resumed, a.outbid_at = True, None
            _mark(a, u.event.at, "resume")
            _write(j, a, u.event)
        case up.OutbidAgain():
            _mark(a, u.at, "stop")
            j.fact(
                K.STOP, a, at=u.at, actor="market", ok=True, reason="outbid again after its resume"
            )
        case up.BidChanged():
            # a raise remembers the bid it rose from (where a lowering stops,
            # `bidding.lower_bid`), and a lowering back to that bid forgets it
            if a.bid is not None and u.price > a.bid and a.raised_from is None:
                a.raised_from = a.bid
            elif a.raised_from is not None and u.price <= a.raised_from:
                a.raised_from = None
            a.bid = u.price
            _priced(a, u.price, u.event.at)
            _write(j, a, u.event)
        case up.SshFailed():
            a.ssh_failures += 1
            if u.why is not None:
                a.ssh_error = u.why
        case up.WentSilent():
            # its host may be offline, which no list can filter by, so the poll looks; the
            # rules stop it when the silence lasts, which counts only while the market says it runs
            a.look_wanted = True
            if a.silent_since is None and a.status == "running":
                a.silent_since = u.at
        case up.KeyChanged():
            if not a.untrusted:
                a.untrusted = u.why
                j.fact(K.HOST_KEY_CHANGED, a, reason=u.why, ok=False)
                j.say(f"distrust i:{a.instance_id} m:{a.machine_id}: {u.why}")
        case up.Broken():
            j.fact(K.XID, a, actor=u.rule, ok=False, reason=u.reason, detail=u.detail)
            j.say(f"xid    i:{a.instance_id} m:{a.machine_id}: {u.reason}")
            if a.host_fault is None:
                a.host_fault = (u.rule, u.reason, u.failure_class)
        case up.Sampled():
            _sampled(j, u)
        case up.RowSeen():
            _row_seen(j, u)
        case up.LeftOut():
            a.unseen += 1
            if a.unseen == 1:
                j.fact(
                    K.UNSEEN,
                    a,
                    at=u.at,
                    reason="left out of the market's list answer: still held, asked for directly",
                )
        case up.RowUnread():
            _row_unread(j, u)
        case up.Listed():
            ok = _move(j, a, Phase.BOOTING, u.at, "listed by the marketplace")
        case up.CameUp():
            _came_up(a, u.at)
            ok = _move(j, a, Phase.RUNNING, u.at, u.why)
        case up.PreflightStarted():
            if a.life.phase == Phase.RUNNING:
                ok = _move(j, a, Phase.VERIFYING, u.at, "preflight started")
        case up.Verified():
            ok = _move(j, a, Phase.VERIFIED, u.at, u.reason)
            if a.verified_at is None:
                a.verified_at = u.at
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
        case up.Resumed():
            a.resumed = False
            _came_up(a, u.at)
            j.say(f"resume i:{a.instance_id} back in service: {u.reason}")
            ok = _move(j, a, Phase.VERIFIED, u.at, u.reason)
        case up.Started():
            ok = _move(j, a, Phase.BOOTING, u.at, u.reason)
            # a stop of ours is undone, and so is the idle time seen before it (else the idle
            # rule stops a restarted host again at once); its boot deadline counts from now
            a.stopped_by_us, a.stop_rule = False, ""
            a.status_since = a.clock_from = u.at
            a.util_low_since = a.silent_since = None
        case up.Stopped():
            # an explicit stop never resumes by itself
            a.stopped_by_us, a.outbid_at, a.resumed, a.stop_rule = True, None, False, u.actor
            ok = _move(j, a, Phase.STOPPED, u.at, u.reason)
            j.say(
                f"stop   i:{a.instance_id} m:{a.machine_id} by {u.actor}: {u.reason} "
                f"(${u.usd:.4f} so far)"
            )
        case up.StoppedByMarket():
            _mark(a, u.at, "stop")
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
            a.market_stopped = True  # its job, if any, goes back to the queue at no retry's cost
            if not u.proven:  # never proven: nothing to keep, its disk bills on
                a.market_stop = u.why
        case up.Destroyed():
            ok = _move(j, a, Phase.DESTROYED, u.at, u.reason)
        case up.GaveUp():
            a.failure_class = u.failure_class
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
        case up.Lost():
            ok = _move(j, a, Phase.LOST, u.at, u.why)
            _mark(a, u.at, "destroy")
            j.fact(
                K.LOST,
                a,
                at=u.at,
                ok=True,
                reason=f"instance gone without our destroy: {u.why}",
            )
            j.say(f"lost   i:{a.instance_id} m:{a.machine_id}: {u.why}")
        case up.Returned():
            destroy = next((m for m in reversed(a.marks) if m.kind == "destroy"), None)
            if destroy is not None:  # the write-off's: void
                a.marks.remove(destroy)
            a.unseen = 0
            if u.preflight_again:
                a.preflight_task, a.verdict = None, None
            ok = _move(j, a, u.to, u.at, u.why)
            j.fact(
                K.RETURNED,
                a,
                at=u.at,
                ok=True,
                reason=f"{u.why}: held again as {u.to}, billed as if never written off",
                detail=u.detail,
            )
            j.say(f"back   i:{a.instance_id} m:{a.machine_id}: {u.why}; held again ({u.to})")
        case up.Adopted():
            ok = _move(j, a, Phase.BOOTING, u.at, "adopted")
            a.status, a.status_msg, a.status_since = u.status, u.status_msg, u.at
            a.ssh_host, a.ssh_port = u.ssh_host, u.ssh_port
            a.life = a.life.with_proof(u.proven)
            if u.status == "running":
                ok = _move(j, a, Phase.RUNNING, u.at, "adopted running") and ok
                _came_up(a, u.at)
                if u.proven:
                    why = "adopted, verified before the restart"
                    ok = _move(j, a, Phase.VERIFIED, u.at, why) and ok
            if u.stopped:
                ok = _move(j, a, Phase.STOPPED, u.at, "adopted stopped") and ok
    if a.life.version == version:
        a.life = a.life.bumped()
    return ok


def _mark(a: Attempt, at: float, kind: str, gpu_dph: float | None = None) -> None:
    """A billing mark (core/billing): a create carries its prices, a price change its new one."""
    if kind == "create":
        a.marks.append(Mark(at, kind, a.gpu_dph, a.storage_dph))
    else:
        a.marks.append(Mark(at, kind, gpu_dph=gpu_dph))


def _priced(a: Attempt, price: float, at: float | None = None) -> None:
    """A new GPU price, billed from `at` (None: a restart's replay, whose mark is made)."""
    a.gpu_dph = price
    a.dph_seen = max(a.dph_seen, price)
    if at is not None:
        _mark(a, at, "price", price)


def _came_up(a: Attempt, at: float) -> None:
    """Its container runs (booted, resumed, adopted running): the idle clock restarts, as idle
    readings from before it ran say nothing now."""
    a.running_at = at
    a.util_low_since = a.silent_since = None


def _write(j: Journal, a: Attempt, e: Said) -> None:
    j.fact(e.kind, a, at=e.at, actor=e.actor, ok=True, reason=e.reason, detail=e.detail)
    if e.line:
        j.say(e.line)


def _sampled(j: Journal, u: up.Sampled) -> None:
    a = u.a
    a.samples = (a.samples + u.rows)[-SAMPLES_KEPT:]
    if u.idle_known:
        a.util_low_since = u.idle_since
    t = detect_throttle(a.samples[-10:], u.throttle_ratio)
    if t.throttled and not (a.throttle and a.throttle.throttled):
        j.fact(
            K.THROTTLE,
            a,
            at=u.at,
            reason=t.reason,
            detail={"slowdown": t.slowdown, "reasons": list(t.reasons)},
        )
        j.say(f"throttle i:{a.instance_id} m:{a.machine_id}: {t.reason}")
    a.throttle = t


def _row_seen(j: Journal, u: up.RowSeen) -> None:
    a, now, status = u.a, u.at, u.status
    if u.listed:
        a.unseen = 0
    if u.gpu_dph > max(a.dph_seen, a.gpu_dph) * PRICE_SLACK and a.gpu_dph > 0:
        j.fact(
            K.NOTE,
            a,
            at=now,
            ok=False,
            reason=f"billed price ${u.gpu_dph:.4f}/h contradicts the offer's "
            f"${a.gpu_dph:.4f}/h: the budget counts the higher one",
            detail={"dph_seen": u.gpu_dph, "dph_offer": a.gpu_dph},
        )
        j.say(f"price  i:{a.instance_id} billed ${u.gpu_dph:.4f}/h, offer said ${a.gpu_dph:.4f}/h")
    a.dph_seen = max(a.dph_seen, u.gpu_dph)
    if status != a.status:
        changed = u.changed_at
        j.fact(
            K.STATUS,
            a,
            at=changed,
            reason=f"status {a.status or 'none yet'} -> {status}",
            detail={"status": status, "msg": (u.status_msg or "")[:300]},
        )
        # billing marks as Vast bills: nothing while offline (neither GPU nor storage)
        if a.status == "offline" and status not in ("offline", "stopped"):
            _mark(a, changed, "online")  # the host answers again
        gpu_on = ("running", "frozen")  # frozen: "GPU charges apply" (Vast's show-instance)
        if status in gpu_on and a.status not in gpu_on:
            _mark(a, changed, "running")
        elif status == "offline":
            _mark(a, now, "offline")
        elif a.status == "running" and status in ("exited", "unknown"):
            _mark(a, now, "halt")
    if status != a.status or u.status_msg != a.status_msg:
        a.status_since = now
    a.status, a.status_msg = status, u.status_msg
    if status != "running":
        a.silent_since = None  # not running by the market's word: no answer is owed
    a.ssh_host, a.ssh_port = u.ssh_host, u.ssh_port
    a.read_at = now
    if a.unread:  # after its status's marks: they may date from before now
        a.marks.append(Mark(now, "read"))
        j.fact(
            K.READ_AGAIN,
            a,
            at=now,
            reason="its row read well again: billed as it reads from here",
        )


def _row_unread(j: Journal, u: up.RowUnread) -> None:
    """Billed as running (its last price) and online from its last good read (its create, if
    none): what the market may bill for it while rentwatch cannot read its row, never less."""
    a = u.a
    if a.unread:
        return
    since = a.read_at if a.read_at is not None else a.created_at
    bisect.insort(a.marks, Mark(since, "unread"), key=attrgetter("at"))
    j.fact(
        K.UNREAD,
        a,
        at=since,
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
        at=at,
        ok=False,
        reason=f"illegal lifecycle move {t.before} -> {t.after} refused ({why})",
        detail={"before": str(t.before), "after": str(t.after), "why": why},
    )
    j.say(f"error  i:{a.instance_id} refused {t.before} -> {t.after}: {why}")
    return False
