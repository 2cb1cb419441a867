"""The operator's intents carried out: stop, start, destroy (with its typed confirmation, the only
way a proven instance is destroyed), one more create, the wanted fleet, and hand-over. The
operator's intent wins: a start resets deadlines, a stop of a verified instance lowers the fleet."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.decisions import Create, Decision
from ..core.lifecycle import Phase
from ..ledger import EventKind
from .actions import Actions
from .attempt import Attempt
from .fleet import Fleet
from .intents import (
    AutomationRefused,
    CreateIntent,
    DestroyConfirmation,
    DestroyIntent,
    FleetSizeIntent,
    HandOverIntent,
    Intent,
    Reply,
    StartIntent,
    StopIntent,
)
from .journal import Journal
from .offers import OfferBook
from .updates import HandedOver, Set

HUMAN = "human"
STARTED_BY_PERSON = "started by a person"  # the act the drained rule's clock waits on
HUMAN_RECENT_S = 10 * 60.0  # market seconds: a person's act this recent is named by automation


@dataclass(eq=False)
class Operator:
    actions: Actions
    fleet: Fleet
    offers: OfferBook
    journal: Journal
    policy: str
    # rentals whose stop by a person lowered the fleet
    lowered: set[int] = field(default_factory=set, init=False)
    fleet_set_at: float | None = field(default=None, init=False)  # a person's last resize

    async def apply(self, intent: Intent) -> Reply:
        """Carry out an intent the door let through (an instance it names is held: the door's
        rule); `AutomationRefused` when it may not be."""
        match intent:
            case DestroyIntent(confirmation=confirmation, reason=reason):
                iid = confirmation.instance_id
                done = await self._destroy(confirmation, reason)
                return Reply.of(done, iid, f"destroyed {iid}", f"destroy of {iid} FAILED", True)
            case StopIntent(instance_id=iid, reason=reason):
                done = await self._stop(self.fleet[iid], reason)
                return Reply.of(done, iid, f"stopped {iid}", f"stop of {iid} FAILED")
            case StartIntent(instance_id=iid, reason=reason):
                await self._start(self.fleet[iid], reason)
                return Reply(True, f"started {iid}", (iid,))
            case CreateIntent(reason=reason):
                rented = await self._create(reason)
                if rented is None:
                    return Reply(False, "no instance rented: no fit offer, or the create failed")
                return Reply(True, f"asked the market for one more instance: i:{rented}", (rented,))
            case FleetSizeIntent(size=size, reason=reason):
                if size < 0:
                    raise AutomationRefused(f"a fleet of {size} makes no sense")
                old = self.resize(size, HUMAN, reason)
                return Reply(True, f"fleet size {old} -> {size}")
            case HandOverIntent(instance_id=iid, reason=reason):
                self._hand_over(self.fleet[iid], reason)
                return Reply(True, f"handed {iid} over to automation", (iid,))
        raise AutomationRefused(f"unknown intent {intent!r}")

    def resize(self, size: int, actor: str = HUMAN, reason: str = "operator set the fleet") -> int:
        """The wanted fleet size, `fleet.wanted`, read by everything that counts toward it,
        recorded as a human act; returns the old one."""
        old = self.fleet.wanted
        size = max(0, size)
        self.fleet.wanted = size
        self.fleet_set_at = now = self.actions.market.now()
        why = f"wanted fleet {old} -> {size}: {reason}"
        detail = {"old": old, "new": size}
        self.journal.fact(
            EventKind.FLEET_SIZE, None, at=now, actor=actor, reason=why, detail=detail
        )
        self.journal.say(f"fleet  {old} -> {size} by {actor}: {reason}")
        return old

    def mind(self, d: Decision, now: float) -> None:
        """An automated decision on what a person touched within `HUMAN_RECENT_S` says so first."""
        if isinstance(d, Create):
            set_at = self.fleet_set_at
            if set_at is not None and now - set_at < HUMAN_RECENT_S:
                self.journal.say(
                    f"note   {d.rule} creates toward the fleet of {self.fleet.wanted} a person "
                    f"set {(now - set_at) / 60:.1f} min ago"
                )
            return
        iid = getattr(d, "instance_id", None)
        a = self.fleet.get(iid) if iid is not None else None
        if a is None or a.human_at is None or now - a.human_at >= HUMAN_RECENT_S:
            return
        rule = getattr(d, "rule", type(d).__name__)
        self.journal.say(
            f"note   {rule} acts on i:{a.instance_id}, which a person touched "
            f"{(now - a.human_at) / 60:.1f} min ago ({a.human_act})"
        )

    def _touched(self, a: Attempt, act: str) -> None:
        self.journal.writer.emit(Set(a, {"human_at": self.actions.market.now(), "human_act": act}))

    async def _stop(self, a: Attempt, reason: str) -> bool:
        """A stop. Of a verified, supervised instance it also lowers the wanted fleet, first,
        so that no poll in between replaces it (at whatever price the market asks now)."""
        in_service = a.owned and a.passed_preflight and a.life.phase == Phase.VERIFIED
        shrink = in_service and self.fleet.wanted > 0
        if shrink:
            self.resize(
                self.fleet.wanted - 1, HUMAN, f"stopped verified i:{a.instance_id}: not replaced"
            )
        self._touched(a, "stopped by a person")
        done = await self.actions.stop(a, HUMAN, reason)
        if shrink and not done:
            self.resize(self.fleet.wanted + 1, HUMAN, f"the stop of i:{a.instance_id} failed")
        elif shrink:
            self.lowered.add(a.instance_id)
        return done

    async def _start(self, a: Attempt, reason: str) -> None:
        """A start: its deadlines count from now. One whose stop by a person lowered the fleet
        raises it back by one; one automation stopped leaves it as it is."""
        await self.actions.start(a, HUMAN, reason)
        self._touched(a, STARTED_BY_PERSON)
        self.journal.say(f"start  i:{a.instance_id} by human: its deadlines count from now")
        if a.instance_id in self.lowered:
            self.lowered.discard(a.instance_id)
            self.resize(self.fleet.wanted + 1, HUMAN, f"started proven i:{a.instance_id} again")

    async def _destroy(self, confirmation: DestroyConfirmation, reason: str) -> bool:
        """The only path that may destroy a verified instance: the operator typed its id."""
        if not confirmation.valid():  # a client's word is not a confirmation
            raise AutomationRefused(
                f"destroy of {confirmation.instance_id} refused: the typed id "
                f"{confirmation.typed.strip()[:20]!r} does not name it"
            )
        a = self.fleet[confirmation.instance_id]
        if a.preflight_task:
            a.preflight_task.cancel()
        self._touched(a, "destroyed by a person")
        done = await self.actions.destroy(a, HUMAN, reason)
        cost = a.charges(self.actions.market.gpu_billing, self.actions.market.now()).total_usd
        self.journal.say(
            f"destroy i:{a.instance_id} m:{a.machine_id} by human: {reason} "
            + (f"(${cost:.4f} in all)" if done else "FAILED (see the ledger)")
        )
        return done

    def _hand_over(self, a: Attempt, reason: str) -> None:
        """An instance rentwatch did not create, handed over: from now automation supervises it
        under the campaign's policy; recorded as a human act, with what now applies to it."""
        if a.owned:
            raise AutomationRefused(f"instance {a.instance_id} is already supervised")
        now = self.actions.market.now()
        self.journal.writer.emit(HandedOver(a, now))
        self._touched(a, "handed over by a person")
        applies = (
            f"policy {self.policy}: boot, freeze and fatal-status rules (an instance that never "
            "verifies is destroyed), a compute preflight over SSH with rentwatch's key, the "
            "watchdog, jobs, and stop-or-destroy when the session ends"
        )
        self.journal.fact(
            EventKind.HAND_OVER,
            a,
            at=now,
            actor=HUMAN,
            reason=f"{reason}; now applies: {applies}",
            detail={"policy": self.policy},
        )
        self.journal.say(f"handover i:{a.instance_id} by human: now supervised under {applies}")

    async def _create(self, reason: str) -> int | None:
        if self.offers.stale():
            await self.offers.refresh()
        best = self.offers.best()
        if best is None:
            self.journal.say("create skipped: no fit offer (price, CUDA, quarantine)")
            return None
        offer, why = best
        rented = await self.actions.create(offer, HUMAN, reason, why)
        self.offers.tried(offer)
        return None if rented is None else rented.instance_id
