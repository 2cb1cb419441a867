"""The interruptible tier in the engine: the terms the rules bid under, what the observer saw of bid
rentals, and the tier's decisions carried out. An outbid kills the job at once (Vast's
`faq/rental-types.mdx`), so the job is requeued from its last checkpoint without costing a retry;
the rental stays stopped for the rules."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core.bidding.rules import BidTerms
from ..core.bidding.tier import checkpoint_every_s, move_share, tier_for, work_lost_s
from ..core.billing import price_of
from ..core.campaign import Campaign
from ..core.decisions import Move, Rebid, Resume
from ..core.jobs import JobState
from ..core.lifecycle import Phase
from ..core.models import Instance
from ..ledger import Event, EventKind, Ledger
from ..market.errors import REFUSALS
from ..market.protocol import Market
from .actions import Actions
from .attempt import Attempt
from .fleet import Fleet
from .jobs.work import JobWork
from .journal import Journal
from .updates import (
    BidChanged,
    BidRestored,
    Outbid,
    OutbidAgain,
    Resumed,
    ResumedItself,
    Said,
    Set,
)

K = EventKind
GONE = (Phase.ABANDONED, Phase.DESTROYED, Phase.LOST)  # a pause reads STOPPED: not gone


def hold_bid(
    journal: Journal, a: Attempt, bid: float, inst: Instance, history: Sequence[Event]
) -> None:
    """A bid rental adopted: its bid, whether its last stop was ours, and since when it has been
    paused. A stop the reconciler found is not ours (most often an outbid): taken for ours it
    resumes by itself unwatched (held-out 8128:2 billed 29 min so). One never proven is given up,
    as a bid refused at create is."""
    tier = [e for e in history if e.kind in (K.OUTBID, K.RESUMED, K.STOP, K.START)]
    last = tier[-1] if tier else None
    ours = last is not None and last.kind == K.STOP and last.actor not in ("market", "reconcile")
    paused_at = None
    if inst.target_state == "stopped" and not ours:
        paused = last is not None and last.kind in (K.OUTBID, K.STOP)
        paused_at = last.at if paused and last is not None else a.created_at
    rebids = [e for e in history if e.kind == K.REBID and e.ok is not False and e.phase != "intent"]
    rebid = price_of(rebids[-1].detail.get("price")) if rebids else None
    unproven = paused_at is not None and not a.passed_preflight
    journal.writer.emit(BidRestored(a, bid, inst.bid_floor, ours, paused_at, rebid, unproven))


@dataclass(eq=False)
class TierWatch:
    market: Market
    journal: Journal
    fleet: Fleet
    jobs: JobWork
    actions: Actions
    campaign: Campaign
    policy_name: str
    outbids: Counter[int] = field(default_factory=Counter, init=False)  # instance id -> seen
    # outbids and those that ended in a move (let go, or outbid before it was proven), in
    # the ledger before this start and since (`bidding.move_share`)
    moves_seen: list[int] = field(default_factory=lambda: [0, 0], init=False)
    # the ledger's record of the tier over every campaign, read at the start
    # (`restore`); this run adds what it sees from then on (`exposure`)
    past: tuple[tuple[int, str, float, int], ...] = field(default=(), init=False)
    since: float = field(default=float("-inf"), init=False)
    # instance id -> seconds paused since `since`
    paused_s: dict[int, float] = field(default_factory=dict, init=False)
    # instance id -> when it was seen stopped or gone
    ended: dict[int, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.jobs.ckpt_every = self.checkpoint_every

    def restore(self, ledger: Ledger, now: float) -> None:
        """The outbid record of every campaign before this start: the rate the bids and
        `auto`'s choice read, as the machine record is read for the ranking."""
        self.past, self.since = tuple(ledger.bid_exposure()), now
        outbids = ledger.events(where="kind = 'outbid'")
        moved = [e for e in outbids if e.detail.get("verified") is False]
        moved += ledger.events(where="kind = 'moved'")
        self.moves_seen = [len(outbids), len(moved)]

    # -- what the rules decide under ----------------------------------------------------------
    def terms(self, now: float) -> BidTerms | None:
        """The tier's terms, or None where the campaign (or the policy: seed) rents on-demand."""
        if self.campaign.rental == "on-demand" or self.policy_name == "seed":
            return None
        pending = [j for j in self.jobs.queue.jobs if j.status == "pending"]
        if self.jobs.by_work:  # the dispatch's order: the biggest job first
            pending.sort(key=lambda j: -j.size)
        job = pending[0].job if pending else None
        return BidTerms(
            tier_for(job, self.campaign, self.policy_name),
            self.campaign.rental,
            self.campaign.max_bid_dph,
            job.checkpoint_every_s if job is not None else 600.0,
            self.exposure(now),
            move_share(*self.moves_seen),
        )

    def exposure(self, now: float) -> tuple[tuple[int, str, float, int], ...]:
        """Each bid rental's (machine, model, hours running on bid, outbids); not paused hours."""
        mine = []
        for iid, a in self.fleet.attempts.items():
            if a.bid is None or a.machine_id is None:
                continue
            if iid not in self.ended and (a.stopped_by_us or a.life.phase in GONE):
                self.ended[iid] = now
            end = self.ended.get(iid, now)
            ran = max(0.0, end - max(a.created_at, self.since)) - self.paused_s.get(iid, 0.0)
            if a.outbid_at is not None:  # paused now, or its job moved on from the pause
                ran -= max(0.0, end - max(a.outbid_at, self.since))
            mine.append((a.machine_id, a.gpu_name, max(0.0, ran) / 3600, self.outbids[iid]))
        return self.past + tuple(mine)

    def checkpoint_every(self, a: Attempt, job: JobState) -> float:
        """A job on a bid rental pulls its checkpoint oftener where outbids are common."""
        base = job.job.checkpoint_every_s
        if a.bid is None:
            return base
        terms = self.terms(self.market.now())
        return (
            base
            if terms is None
            else checkpoint_every_s(base, terms.rate(a.machine_id, a.gpu_name))
        )

    # -- what the observer saw ----------------------------------------------------------------
    def outbid(self, a: Attempt, inst: Instance, now: float) -> None:
        """A bid rental the market stopped for a higher bid (or an on-demand renter): the job
        on it goes back to the queue from its last checkpoint; the rental waits, stopped."""
        job = self.jobs.queue.on(a.instance_id)
        # a job still waiting here for its state's copy never ran here: it lost nothing here,
        # and its state still waits where it was (`Rescues.forget` puts it back)
        waiting = job is not None and self.jobs.rescues.waiting(job)
        low = f"${inst.bid_floor:.4f}/h" if inst.bid_floor is not None else "unknown"
        reason = f"outbid: our bid ${a.bid or 0:.4f}/h against bid_floor {low}"
        lost, kept = None, False
        if job is not None:
            began = now if job.started_at is None or waiting else job.started_at
            checkpoint = self.jobs.last_checkpoint(job)
            lost, kept = work_lost_s(now, began, checkpoint), checkpoint is not None
            since = "its last checkpoint" if kept else "it started (no checkpoint came off yet)"
            reason += f"; job {job.name} lost {lost / 60:.1f} min since {since}"
        self.outbids[a.instance_id] += 1
        self.moves_seen[0] += 1
        self.moves_seen[1] += 0 if a.passed_preflight else 1  # given up: a fresh create next
        event = Said(
            K.OUTBID,
            now,
            "market",
            reason,
            {
                "bid": a.bid,
                "bid_floor": inst.bid_floor,
                "work_lost_s": lost,
                "job": job.name if job is not None else None,
                "verified": a.passed_preflight,
            },
            f"outbid i:{a.instance_id} m:{a.machine_id} bid ${a.bid or 0:.4f}/h < {low}",
        )
        self.journal.writer.emit(Outbid(a, inst.bid_floor, event))
        held = self.jobs.queue.on(a.instance_id, "finishing")
        if held is not None:  # exited there: its output waits on the disk (JobWork.reap)
            self.journal.say(f"output of {held.name} waits on i:{a.instance_id} for its resume")
        if job is not None:
            start = "its last checkpoint" if kept else "the start (no checkpoint came off yet)"
            self.jobs.requeue(
                job,
                now,
                f"its bid rental was outbid: from {start}",
                outbid=True,
                lost_counted=True,  # the outbid event has the work it cost: counted once
            )
            # its newer state stays there; none worth a copy if it was never seen running
            if not waiting:
                sure = lost if job.seen_running_at is not None else None
                self.jobs.rescues.outbid(job, a.instance_id, sure)

    def saw(self, a: Attempt, inst: Instance, now: float) -> None:
        """Each row of a bid rental: its bid_floor; out of service, a resume by itself (it bills
        again from now), or a resumed one outbid again before the rules took it back."""
        if inst.bid_floor is not None:
            self.journal.writer.emit(Set(a, {"bid_floor": inst.bid_floor}))
        if a.life.phase != Phase.STOPPED or not a.resumes_by_itself:
            return
        if inst.known_status == "running" and not inst.market_stopped and not a.resumed:
            # it bills again from when it ran: the status mark the observer just made, where
            # one came after the stop (a row whose status never left running dates it now);
            # the ledger reads the event alike (`billing.EVENT_MARKS`)
            stop = next((m.at for m in reversed(a.marks) if m.kind == "stop"), a.created_at)
            ran = next((m.at for m in reversed(a.marks) if m.kind == "running"), None)
            at = min(now, ran if ran is not None and ran >= stop else now)
            paused = at - a.outbid_at if a.outbid_at is not None else None
            if a.outbid_at is not None:
                was = self.paused_s.get(a.instance_id, 0.0)
                self.paused_s[a.instance_id] = was + max(0.0, at - max(a.outbid_at, self.since))
            event = Said(
                K.RESUMED,
                at,
                "market",
                f"resumed by itself at ${a.bid or 0:.4f}/h: it bills again from here",
                {"bid": a.bid, "bid_floor": inst.bid_floor, "paused_s": paused},
                f"resume i:{a.instance_id} m:{a.machine_id} ran again by itself",
            )
            self.journal.writer.emit(ResumedItself(a, event))
        elif a.resumed and inst.market_stopped:  # outbid again before the rules took it back
            self.journal.writer.emit(OutbidAgain(a, now))
            self.outbid(a, inst, now)

    # -- the tier's decisions, carried out ----------------------------------------------------
    async def rebid(self, a: Attempt, d: Rebid) -> None:
        now = self.market.answered_at()
        old = a.bid
        if old is None or d.price > old:  # a bid brought down (rule:bid_down) fights no one
            self.journal.writer.emit(Set(a, {"rebids": a.rebids + 1}))
        detail = {"price": d.price, "old": old, "bid_floor": a.bid_floor}
        try:
            await self.market.change_bid(a.instance_id, d.price, a.num_gpus)
        except REFUSALS as exc:
            self.journal.fact(
                K.REBID,
                a,
                at=now,
                actor=d.rule,
                ok=False,
                reason=f"{d.reason}: refused ({exc})",
                detail=detail,
            )
            self.journal.say(f"rebid FAILED i:{a.instance_id} ${d.price:.4f}/h: {exc}")
            return
        line = f"rebid  i:{a.instance_id} ${old or 0:.4f} -> ${d.price:.4f}/h: {d.reason}"
        event = Said(K.REBID, now, d.rule, d.reason, detail, line)
        self.journal.writer.emit(BidChanged(a, d.price, event))

    async def move(self, a: Attempt, d: Move) -> None:
        """Its job has moved on: stop waiting, and stop it ourselves so it never resumes."""
        now = self.market.answered_at()
        paused = now - a.outbid_at if a.outbid_at is not None else None
        self.moves_seen[1] += 1
        self.journal.fact(
            K.MOVED,
            a,
            at=now,
            actor=d.rule,
            ok=True,
            reason=d.reason,
            detail={"price": a.bid, "bid_floor": a.bid_floor, "paused_s": paused},
        )
        await self.actions.stop(a, d.rule, d.reason)

    def resume(self, a: Attempt, d: Resume) -> bool:
        """Back into service (its proof stands: same machine, disk kept). True when it moved."""
        self.journal.writer.emit(Resumed(a, self.market.answered_at(), d.reason))
        return a.life.phase == Phase.VERIFIED
