"""The executor: each decision `decide()` returned, carried out; nothing here decides. An `Abandon`
never destroys a verified instance: the executor's own guard, beside the type's."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.decisions import (
    Abandon,
    Create,
    Decision,
    Finish,
    Move,
    Rebid,
    Restart,
    Resume,
    StartPreflight,
    Stop,
    Verify,
)
from ..core.lifecycle import Phase
from ..core.offers.choice import Quarantine
from ..core.policy import Policy
from ..ledger import EventKind
from ..market.errors import REFUSALS
from ..market.protocol import Market
from .actions import Actions
from .attempt import Attempt
from .blame_book import BlameBook
from .fleet import Fleet
from .hosts.ssh import SSHRunner
from .hosts.tender import HostTender
from .intents import AutomationRefused
from .journal import Journal
from .offers import OfferBook
from .operator import Operator
from .tier import TierWatch
from .updates import GaveUp, Set, Verified

K = EventKind


@dataclass
class Outcome:
    ok: bool
    reason: str


@dataclass(eq=False)
class Executor:
    market: Market
    fleet: Fleet
    journal: Journal
    actions: Actions
    blame_book: BlameBook
    offer_book: OfferBook
    operator: Operator
    tender: HostTender
    ssh: SSHRunner
    policy: Policy
    tier: TierWatch  # the interruptible tier's rebid, move and resume

    async def execute(self, d: Decision) -> Outcome | None:
        """Carry out one decision; a `Finish` comes back as the campaign's outcome."""
        self.operator.mind(d, self.market.answered_at())
        if isinstance(d, Create):
            await self.create(d)
        elif isinstance(d, Abandon):
            await self.abandon(d)
        elif isinstance(d, Stop):
            a = self.fleet[d.instance_id]
            if d.quarantine is not None:
                self.quarantine(a, d.rule, d.quarantine, self.market.answered_at())
            await self.actions.stop(a, d.rule, d.reason)
        elif isinstance(d, StartPreflight):
            self.tender.start_preflight(self.fleet[d.instance_id])
        elif isinstance(d, Verify):
            self.verify(self.fleet[d.instance_id], d)
        elif isinstance(d, Finish):
            return Outcome(d.ok, d.reason)
        elif isinstance(d, Restart):
            await self.restart(self.fleet[d.instance_id], d)
        elif isinstance(d, Rebid | Move | Resume):
            # an outbid rental's rebid or move, or a resumed one back in service (engine/tier)
            a = self.fleet[d.instance_id]
            if isinstance(d, Rebid):
                await self.tier.rebid(a, d)
            elif isinstance(d, Move):
                await self.tier.move(a, d)
            elif self.tier.resume(a, d):
                self.tender.retend([a])  # watched again: its watchdog, heartbeat and jobs
        return None

    async def restart(self, a: Attempt, d: Restart) -> None:
        """A proven rental stopped for want of work, started again (core/offers/reuse.py): it boots
        and is checked as any start is; one the market refuses is not asked again."""
        try:
            await self.actions.start(a, d.rule, d.reason)
        except REFUSALS as exc:
            self.journal.writer.emit(Set(a, {"stop_rule": ""}))  # not tried again by the rules
            self.journal.say(f"start  i:{a.instance_id} by {d.rule} refused: {exc}")
            return
        self.journal.say(f"start  i:{a.instance_id} m:{a.machine_id} by {d.rule}: {d.reason}")

    async def create(self, d: Create) -> None:
        # a campaign fault, or a pull in doubt, found since this poll decided
        if self.blame_book.holds_creates(bool(self.fleet.alive())):
            return
        if d.offer is None:
            self.journal.say("create skipped: no fit offer (price, CUDA, quarantine)")
            return
        await self.actions.create(d.offer, d.rule, d.reason, d.why, d.bid)
        self.offer_book.tried(d.offer)

    async def abandon(self, d: Abandon) -> None:
        a = self.fleet[d.instance_id]
        if a.passed_preflight:  # the executor's own guard, beside the decision type's
            raise AutomationRefused(f"automation may not destroy verified instance {a.instance_id}")
        now = self.market.answered_at()
        if a.life.phase != Phase.ABANDONED:
            self.blame_book.on_abandon(a, d)  # what it says of blame, recorded
            spent = a.charges(self.market.gpu_billing, now).total_usd
            extra = {"usd": spent, **self.blame_book.detail(a)}
            line = (
                f"abandon i:{a.instance_id} m:{a.machine_id} [{d.failure_class}] {d.reason} "
                f"(${spent:.4f}, {(now - a.created_at) / 60:.1f} min)"
            )
            self.journal.writer.emit(GaveUp(a, now, d.rule, d.reason, d.failure_class, extra, line))
            if a.preflight_task:
                a.preflight_task.cancel()
            if d.failure_class != "cancelled" and a.instance_id not in self.blame_book.spared:
                self.fleet.failed_on(a.machine_id)
            if d.quarantine is not None:
                self.quarantine(a, d.rule, d.quarantine, now)
        await self.actions.destroy(a, d.rule, f"abandoned: {d.reason}")

    def quarantine(self, a: Attempt, rule: str, q: Quarantine, now: float) -> None:
        self.fleet.quarantined(q)
        self.journal.fact(
            K.QUARANTINE,
            a,
            at=now,
            actor=rule,
            reason=q.reason,
            detail={"until": q.until, "class": q.failure_class, "scope": q.scope},
        )

    def verify(self, a: Attempt, d: Verify) -> None:
        detail = {
            "tflops": a.verdict.tflops if a.verdict else None,
            "expected": a.verdict.expected if a.verdict else None,
            # pinned here, held to after a restart (see Recovery.adopt)
            "host_key": self.ssh.pinned.get(a.instance_id),
        }
        now = self.market.answered_at()
        self.journal.writer.emit(Verified(a, now, d.rule, d.reason, d.by_preflight, detail))
        # a rental started again was tended before: its last tending ended with its stop
        if d.by_preflight and (a.tend_task is None or a.tend_task.done()):
            self.tender.tend_from_now(a)
