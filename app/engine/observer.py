"""Observe: fold one list answer into the fleet record, as evidence, not truth.

An unreadable row costs that row this poll. An instance a full answer leaves out is unseen, not
gone: held, billed, and asked for directly; it is written off (`lost`) only when the market says
it is gone or after `UNSEEN_WRITE_OFF` polls without an answer. One listed again after that was
not gone (`returned`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.bidding.tier import stop_cause
from ..core.errors import BadRow
from ..core.lifecycle import ALIVE, Phase
from ..core.models import Instance
from ..core.policy import Policy
from ..core.rows import row_problem
from ..core.rules import low_util_since
from ..ledger import EventKind
from ..market.errors import REFUSALS, NotFound
from ..market.protocol import Market
from .attempt import Attempt
from .blame_book import BlameBook
from .cadence import Sight
from .fleet import Fleet
from .hosts.ssh import SSHRunner
from .journal import Journal
from .release import proven
from .updates import (
    CameUp,
    LeftOut,
    Listed,
    Lost,
    Returned,
    RowSeen,
    RowUnread,
    Set,
    StoppedByMarket,
)

if TYPE_CHECKING:
    from .tier import TierWatch

K = EventKind
LOST_AFTER_S = 120.0  # a create may take this long to be listed before it counts as unseen
UNSEEN_WRITE_OFF = 10  # polls unseen, and unanswered when asked directly, before a write-off


@dataclass(eq=False)
class Observer:
    market: Market
    journal: Journal
    fleet: Fleet
    policy: Policy
    ssh: SSHRunner | None = None
    blame_book: BlameBook | None = None
    tier: TierWatch | None = None  # the interruptible tier: outbids and resumes
    bad_rows: int = field(default=0, init=False)  # rows skipped in all
    # held again this poll: the supervisor tends them
    returned: list[Attempt] = field(default_factory=list, init=False)
    # instances whose bad row is already in the ledger (for a row without a usable id, its
    # problem), and how many of the client's own skipped rows are
    _reported: set[int | str] = field(default_factory=set, init=False)
    _client_bad: int = field(default=0, init=False)

    async def observe(self, sight: Sight, now: float) -> None:
        """Fold one poll's rows in. What a whole list answer (or a finished sweep) leaves out is
        unseen; one a filtered answer was asked for by name and left out gets a closer look;
        the rest was not asked for and is not looked at. A bad row is still a row: there,
        unread this poll."""
        self._client_rows(now)
        live: dict[int, Instance] = {}
        bad: set[int] = set()
        for iid, why in sight.bad:
            bad.add(iid)
            self._bad_row(iid, why, now)
        for inst in sight.rows:
            problem = row_problem(inst)
            if problem is None:
                live[inst.id] = inst
            else:
                bad.add(inst.id)
                self._bad_row(inst.id, problem, now)
        swept = sight.swept
        for a in list(self.fleet.attempts.values()):
            iid, listed = a.instance_id, live.get(a.instance_id)
            if a.life.phase == Phase.LOST and listed is not None:
                self._returned(a, listed, now)
            elif a.life.phase in (Phase.DESTROYED, Phase.LOST):
                continue
            elif listed is not None:
                self._see(a, listed, now, listed=True)
            elif iid in bad:
                continue
            elif iid in sight.asked:
                await self._missing(a, now, unseen=False)
            elif sight.full or swept is not None and iid not in swept:
                await self._missing(a, now)

    async def _missing(self, a: Attempt, now: float, unseen: bool = True) -> None:
        """Left out of a list answer (`unseen`: a full one): asked for directly, unless a create
        still new. The market's word that it is gone writes it off; a refusal leaves it to the
        next list, but one unseen for UNSEEN_WRITE_OFF polls is written off. The look gives up
        as the poll's lists do (a try or two), so many instances to look at cannot hold one
        poll for minutes of backoff."""
        if a.life.phase == Phase.REQUESTED and now - a.created_at <= LOST_AFTER_S:
            return
        if unseen:
            self.journal.writer.emit(LeftOut(a, now))
        try:
            with self.market.polling():
                inst = await self.market.show_instance(a.instance_id)
        except BadRow as exc:
            if unseen:  # answered for, so not unseen (never written off for it), but unread
                self.journal.writer.emit(Set(a, {"unseen": 1}))
            self._bad_row(a.instance_id, exc.problem, now)
            return
        except NotFound:
            inst = None
        except REFUSALS as exc:
            if unseen and a.unseen >= UNSEEN_WRITE_OFF:
                self.journal.say(
                    f"WARN   i:{a.instance_id} unseen for {a.unseen} polls and the market "
                    f"would not answer for it ({exc}): written off"
                )
                self.journal.writer.emit(
                    Lost(a, now, f"unseen for {a.unseen} polls; the market never answered")
                )
            return
        if inst is None:
            self.journal.writer.emit(Lost(a, now, "the market says it no longer exists"))
        elif (problem := row_problem(inst)) is not None:
            self._bad_row(inst.id, problem, now)
        else:
            self._see(a, inst, now, listed=unseen)

    def _client_rows(self, now: float) -> None:
        """Rows the client itself could not parse (`Market.unread_rows`) go to the ledger too:
        the market client drops them before the observer sees an `Instance`."""
        stats, raw = self.market.unread_rows()
        if stats <= self._client_bad:
            return
        fresh = raw[-min(len(raw), stats - self._client_bad) :]
        self._client_bad = stats
        for iid, problem in fresh:
            self._bad_row(iid if isinstance(iid, int) else None, f"unreadable: {problem}", now)

    def _bad_row(self, iid: int | None, problem: str, now: float) -> None:
        """Said every poll; in the ledger once per instance, or, for a row without a usable
        id, once per distinct problem (such a row is in every list answer while it lasts)."""
        self.bad_rows += 1
        self.journal.say(f"row    i:{iid} skipped this poll: {problem}")
        held = self.fleet.get(iid) if iid is not None else None
        if held is not None and held.life.phase not in (Phase.DESTROYED, Phase.LOST):
            self.journal.writer.emit(RowUnread(held, now, problem))  # nothing bills unwatched
        key = problem if iid is None else iid
        if key in self._reported:
            return
        self._reported.add(key)
        extra: dict[str, Any] = {} if held is not None else {"instance_id": iid}
        self.journal.fact(
            K.BAD_ROW,
            held,
            at=now,
            ok=False,
            reason=f"market row skipped: {problem}",
            **extra,
        )

    def _returned(self, a: Attempt, inst: Instance, now: float) -> None:
        """Listed again after its write-off: held again where it stood, and billed as if never
        written off (the ledger's `standing_events` drops a `lost` a `returned` answers)."""
        said = {(inst.target_state or "").lower(), (inst.status or "").lower()}
        if said & {"destroyed", "destroying"}:
            return  # listed on its way out: the write-off stands
        gone = a.life.history[-1]  # the move into LOST
        phase: Phase
        again = False
        if gone.before in (Phase.ABANDONED, Phase.STOPPED):
            phase = gone.before
        elif a.life.proven and inst.known_status == "running":
            phase = Phase.VERIFIED
        else:
            phase = Phase.BOOTING
            again = a.preflight_task is not None and a.preflight_task.done() and not a.life.proven
        gap = now - gone.at
        why = f"listed again {gap / 60:.1f} min after its write-off ({gone.why})"
        detail = {"lost_at": gone.at, "gap_s": gap, "status": inst.known_status}
        self.journal.writer.emit(Returned(a, now, phase, why, detail, preflight_again=again))
        if phase == Phase.VERIFIED:
            self.returned.append(a)
        self._see(a, inst, now)

    @staticmethod
    def _ran_from(a: Attempt, inst: Instance, now: float) -> float:
        """When a rental first seen running began: the market's `uptime_mins` where believable, else
        now; a slow poll or a lost answer would otherwise shorten the GPU time billed."""
        if inst.known_status != "running" or a.status == "running" or inst.uptime_mins is None:
            return now
        last = a.marks[-1].at if a.marks else a.created_at  # the marks stay in time order
        return min(now, max(a.status_since, last, now - inst.uptime_mins * 60))

    def _market_stop(self, a: Attempt, inst: Instance, now: float) -> None:
        """A stop we did not ask for: the market's own, recorded as such; the rules replace it."""
        said = "/".join(s or "-" for s in (inst.target_state, inst.current_state, inst.next_state))
        why = f"stopped by the market (intended/cur/next state: {said})"
        if a.preflight_task:
            a.preflight_task.cancel()
        # its job, if any, goes back to the queue at no retry's cost; the rules decide
        self.journal.writer.emit(StoppedByMarket(a, now, why, said, proven=proven(a)))
        cause = stop_cause(inst, bid=a.bid, now=now)
        if cause == "outbid" and self.tier is not None:  # its job requeued; the rules decide
            self.tier.outbid(a, inst, now)

    def _see(self, a: Attempt, inst: Instance, now: float, listed: bool = False) -> None:
        """The market's row for `a` (`listed`: in a list answer, or answered when asked)."""
        status = inst.known_status
        changed = self._ran_from(a, inst, now) if status == "running" else now
        route = (inst.ssh_host, inst.ssh_port)
        seen = RowSeen(a, now, status, inst.status_msg, *route, inst.gpu_dph, changed, listed)
        self.journal.writer.emit(seen)
        if self.blame_book is not None and inst.status_msg and status != "running":
            self.blame_book.saw(a, inst.status_msg)  # layer progress: the registry serves it
        if self.ssh is not None:
            self.ssh.set_routes(a.instance_id, inst)  # direct first, the proxy as fallback
        if a.bid is not None and self.tier is not None:
            self.tier.saw(a, inst, now)  # bid_floor; a resume by itself, an outbid again
        if inst.market_stopped and a.life.phase in ALIVE:
            self._market_stop(a, inst, now)
            return
        if a.life.phase == Phase.REQUESTED:
            self.journal.writer.emit(Listed(a, now))
        if status == "running" and a.life.phase == Phase.BOOTING:
            self.journal.writer.emit(CameUp(a, now))
            if self.blame_book is not None:
                self.blame_book.ran(a)  # the image pulled and started here: evidence
        if a.life.phase == Phase.VERIFIED:
            since = low_util_since(a.util_low_since, inst.gpu_util, self.policy, now)
            self.journal.writer.emit(Set(a, {"util_low_since": since}))
