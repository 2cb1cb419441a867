"""Observe: fold one list answer into the fleet record, treating it as evidence, not truth.

A row that fails validation (a number that is not finite, a negative price) costs that row
this poll, recorded with its id; the rest of the fleet is supervised as usual. An instance a
full list answer (a whole list, or a sweep's pages together: `cadence.py`) leaves out is
*unseen*, not gone (one a filtered answer was not asked for is neither): it stays held, billed and watched, and the market is
asked for it directly (`show_instance`). It is written off (`lost`) only when the market says it
no longer exists, or after `UNSEEN_WRITE_OFF` polls in which neither the list nor the direct
question answered for it (with a warning in the decision log)."""

from __future__ import annotations

import math
from typing import Any

from .attempt import Attempt
from .core.billing import Mark
from .core.lifecycle import Phase
from .core.models import Instance
from .core.policy import Policy
from .core.rules import low_util_since
from .fleet import Fleet
from .journal import Journal
from .ledger import EventKind
from .market import REFUSALS, Market, NotFound

K = EventKind
LOST_AFTER_S = 120.0  # a create may take this long to be listed before it counts as unseen
UNSEEN_WRITE_OFF = 10  # polls unseen, and unanswered when asked directly, before a write-off


def row_problem(inst: Instance) -> str | None:
    """Why a market row cannot be believed (None: it can)."""
    numbers = {
        "dph_base": inst.dph_base,
        "dph_total": inst.dph_total,
        "storage_total_cost": inst.storage_total_cost,
        "gpu_util": inst.gpu_util,
        "start_date": inst.start_date,
    }
    for name, value in numbers.items():
        if value is not None and not math.isfinite(value):
            return f"{name} is not a finite number ({value!r})"
    for name in ("dph_base", "dph_total", "storage_total_cost"):
        if numbers[name] is not None and float(numbers[name] or 0) < 0:
            return f"{name} is negative ({numbers[name]!r})"
    return None


class Observer:
    def __init__(self, market: Market, journal: Journal, fleet: Fleet, policy: Policy) -> None:
        self.market = market
        self.journal = journal
        self.fleet = fleet
        self.policy = policy
        self.bad_rows = 0  # rows skipped in all
        self._reported: set[int] = set()  # instances whose bad row is already in the ledger

    async def observe(
        self,
        instances: list[Instance],
        now: float,
        full: bool = True,
        asked: frozenset[int] = frozenset(),
    ) -> None:
        """Fold one poll's rows in. `full`: a whole list answer, so an instance it leaves out
        is unseen. Otherwise (the poll plan's filtered pages, `app/cadence.py`) an instance
        the poll did not ask for is simply not looked at, and one asked for by name but
        left out gets a one-instance call, without counting as unseen."""
        live: dict[int, Instance] = {}
        bad: set[int] = set()
        for inst in instances:
            problem = row_problem(inst)
            if problem is None:
                live[inst.id] = inst
            else:
                bad.add(inst.id)
                self._bad_row(inst.id, problem, now)
        if not full:
            await self._asked(live, bad, asked, now)
            return
        for a in list(self.fleet.attempts.values()):
            if a.life.phase in (Phase.DESTROYED, Phase.LOST) or a.instance_id in bad:
                continue  # a bad row is still a row: there, unread this poll
            listed = live.get(a.instance_id)
            if listed is None:
                if a.life.phase == Phase.REQUESTED and now - a.created_at <= LOST_AFTER_S:
                    continue
                listed = await self._ask(a, now)
                if listed is None:
                    continue
            a.unseen = 0
            self._see(a, listed, now)

    async def _asked(
        self, live: dict[int, Instance], bad: set[int], asked: frozenset[int], now: float
    ) -> None:
        """A filtered answer: see what it listed; what it was asked for and left out gets a
        closer look; the rest was not asked for and is not looked at."""
        for iid, listed in live.items():
            held = self.fleet.get(iid)
            if held is not None and held.life.phase not in (Phase.DESTROYED, Phase.LOST):
                held.unseen = 0
                self._see(held, listed, now)
        for iid in asked - live.keys() - bad:
            held = self.fleet.get(iid)
            if held is None or held.life.phase in (Phase.DESTROYED, Phase.LOST):
                continue
            if held.life.phase == Phase.REQUESTED and now - held.created_at <= LOST_AFTER_S:
                continue
            looked = await self._look(held, now)
            if looked is not None:
                self._see(held, looked, now)

    async def unlisted(self, listed: set[int], now: float) -> None:
        """After a sweep's pages, together a full list answer: every instance we hold that it
        left out is unseen and asked for directly (as `observe` does for a whole list)."""
        for a in list(self.fleet.attempts.values()):
            if a.life.phase in (Phase.DESTROYED, Phase.LOST) or a.instance_id in listed:
                continue  # a bad row is still a row: there, unread this poll
            if a.life.phase == Phase.REQUESTED and now - a.created_at <= LOST_AFTER_S:
                continue
            seen = await self._ask(a, now)
            if seen is not None:
                a.unseen = 0
                self._see(a, seen, now)

    async def _look(self, a: Attempt, now: float) -> Instance | None:
        """A closer look at one instance a filtered list left out: the market's word that it
        is gone writes it off; a refusal leaves it to the next full list."""
        try:
            inst = await self.market.show_instance(a.instance_id)
        except NotFound:
            inst = None
        except REFUSALS:
            return None
        if inst is None:
            self._lost(a, now, "the market says it no longer exists")
            return None
        problem = row_problem(inst)
        if problem is not None:
            self._bad_row(inst.id, problem, now)
            return None
        return inst

    def _bad_row(self, iid: int, problem: str, now: float) -> None:
        self.bad_rows += 1
        self.journal.say(f"row    i:{iid} skipped this poll: {problem}")
        if iid in self._reported:
            return
        self._reported.add(iid)
        a = self.fleet.get(iid)
        extra: dict[str, Any] = {} if a is not None else {"instance_id": iid}
        self.journal.fact(
            K.BAD_ROW,
            a,
            at=now,
            actor="engine",
            ok=False,
            reason=f"market row skipped: {problem}",
            **extra,
        )

    async def _ask(self, a: Attempt, now: float) -> Instance | None:
        """Left out of the list: ask for it directly. The instance when the market answers
        for it; None when it is gone (written off) or still unseen."""
        a.unseen += 1
        if a.unseen == 1:
            self.journal.fact(
                K.UNSEEN,
                a,
                at=now,
                actor="engine",
                reason="left out of the market's list answer: still held, asked for directly",
            )
        try:
            inst = await self.market.show_instance(a.instance_id)
        except NotFound:
            inst = None
        except REFUSALS as exc:
            if a.unseen >= UNSEEN_WRITE_OFF:
                self.journal.say(
                    f"WARN   i:{a.instance_id} unseen for {a.unseen} polls and the market "
                    f"would not answer for it ({exc}): written off"
                )
                self._lost(a, now, f"unseen for {a.unseen} polls; the market never answered")
            return None
        if inst is None:
            self._lost(a, now, "the market says it no longer exists")
            return None
        problem = row_problem(inst)
        if problem is not None:
            self._bad_row(inst.id, problem, now)
            return None
        return inst

    def _lost(self, a: Attempt, now: float, why: str) -> None:
        self.journal.move(a, Phase.LOST, now, why)
        a.marks.append(Mark(now, "destroy"))
        self.journal.fact(
            K.LOST,
            a,
            at=now,
            actor="engine",
            ok=True,
            reason=f"instance gone without our destroy: {why}",
        )
        self.journal.say(f"lost   i:{a.instance_id} m:{a.machine_id}: {why}")

    def _see(self, a: Attempt, inst: Instance, now: float) -> None:
        status = inst.known_status
        if status != a.status:
            self.journal.fact(
                K.STATUS,
                a,
                at=now,
                actor="engine",
                reason=f"status {a.status} -> {status}",
                detail={"status": status, "msg": (inst.status_msg or "")[:300]},
            )
            if status == "running" and a.status != "running":
                a.marks.append(Mark(now, "running"))
            elif a.status == "running" and status in ("exited", "offline", "unknown"):
                a.marks.append(Mark(now, "halt"))
        if status != a.status or inst.status_msg != a.status_msg:
            a.status_since = now
        a.status, a.status_msg = status, inst.status_msg
        a.ssh_host, a.ssh_port = inst.ssh_host, inst.ssh_port
        if a.life.phase == Phase.REQUESTED:
            self.journal.move(a, Phase.BOOTING, now, "listed by the marketplace")
        if status == "running" and a.life.phase == Phase.BOOTING:
            a.running_at = now
            self.journal.move(a, Phase.RUNNING, now, "container running")
        if a.life.phase == Phase.VERIFIED:
            a.util_low_since = low_util_since(a.util_low_since, inst.gpu_util, self.policy, now)
