"""The market changes the engine makes (create, stop, start, destroy), each written to the ledger as
its intent, each try as it goes out, then the outcome dated to when it took effect."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.bidding.rental_check import rental_mismatch
from ..core.billing import storage_per_hour
from ..core.campaign import Campaign
from ..core.lifecycle import Phase
from ..core.models import Instance, Offer
from ..core.rows import campaign_label
from ..ledger import EventKind
from ..market.errors import REFUSALS, CreateResult
from ..market.protocol import Market
from .attempt import Attempt
from .fleet import Fleet
from .journal import Journal
from .updates import ChangeTookEffect, Destroyed, GaveUp, Started, Stopped

K = EventKind
# Vast's documented recipe: SSH sessions see the container's variables (CONTAINER_ID,
# CONTAINER_API_KEY: the watchdog's means to stop its own instance) only on Vast's own images,
# unless onstart exports them (vast-ai/docs guides/instances/docker-environment.mdx)
ONSTART = "env >> /etc/environment;"
MAX_ID = 2**53  # an id past what a JSON number holds exactly is garbled


@dataclass(eq=False)
class Actions:
    market: Market
    journal: Journal
    fleet: Fleet
    campaign: Campaign
    # (actor, reason) once a person ended the campaign: a create still in flight then
    # lands on a campaign that holds nothing, and is ended as it lands
    ended: Callable[[], tuple[str, str] | None] = lambda: None
    # told the id of an instance our stop or destroy took effect on (its SSH connections close)
    gone: Callable[[int], None] = lambda _: None
    # creates sent and not yet answered: a signal that cancels their caller does not
    # cancel them (the market may be making the rental), and the release waits for them
    creating: set[asyncio.Task[Attempt | None]] = field(default_factory=set, init=False)
    # their labels (the market may list them)
    labels_in_flight: set[str] = field(default_factory=set, init=False)

    async def change(self, a: Attempt, kind: EventKind, actor: str, reason: str) -> float:
        """Stop, start or destroy `a`: returns once it took effect; raises the market's refusal."""
        call = {
            K.STOP: self.market.stop_instance,
            K.START: self.market.start_instance,
            K.DESTROY: self.market.destroy_instance,
        }[kind]
        j = self.journal
        seq = j.intent(kind, j.ctx(a), actor=actor, reason=reason)
        try:
            acted = await call(a.instance_id, lambda at, prev: j.sent(seq, a, actor, at, prev))
        except REFUSALS as exc:
            j.outcome(seq, at=self.market.answered_at(), ok=False, error=str(exc))
            raise
        detail: dict[str, object] = {}
        if not acted.existed:
            detail["already_gone"] = True
        if acted.answer_lost:
            detail["answer_lost"] = True  # dated to the send of the try that got no answer
        j.outcome(seq, at=acted.at, ok=True, detail=detail or None)
        j.writer.emit(ChangeTookEffect(a, acted.at, str(kind)))
        return acted.at

    async def start(self, a: Attempt, actor: str, reason: str) -> float:
        at = await self.change(a, K.START, actor, reason)
        self.journal.writer.emit(Started(a, at, reason))
        return at

    async def stop(self, a: Attempt, actor: str, reason: str) -> bool:
        async with a.acting:
            if a.life.phase == Phase.DESTROYED or (
                a.life.phase == Phase.STOPPED and not a.resumes_by_itself
            ):
                return True  # another task's stop or destroy got there first
            # (a bid rental the market paused is stopped again by us: ours never resumes)
            try:
                at = await self.change(a, K.STOP, actor, reason)
            except REFUSALS as exc:
                self.journal.say(f"stop FAILED i:{a.instance_id}: {exc}")
                return False
            if a.preflight_task:
                a.preflight_task.cancel()
            cost = a.charges(self.market.gpu_billing, at).total_usd
            self.journal.writer.emit(Stopped(a, at, actor, reason, cost))
            self.gone(a.instance_id)
            return True

    async def destroy(self, a: Attempt, actor: str, reason: str) -> bool:
        async with a.acting:
            if a.life.phase == Phase.DESTROYED:
                return True  # another task's destroy got there first
            try:
                at = await self.change(a, K.DESTROY, actor, reason)
            except REFUSALS as exc:
                self.journal.say(f"destroy FAILED i:{a.instance_id}: {exc} (will retry)")
                return False
            self.journal.writer.emit(Destroyed(a, at, reason))
            self.gone(a.instance_id)
            return True

    def _believable(self, instance_id: int) -> bool:
        """A create answer's id is believed only when in range and not one we hold already (adopting
        a new rental under a held id would hand automation a verified one to destroy)."""
        return 0 < instance_id < MAX_ID and instance_id not in self.fleet.attempts

    async def _by_label(self, label: str) -> Instance | None:
        """The rental that carries our unique label, if the market lists one we do not hold."""
        try:
            rows = await self.market.list_instances()
        except REFUSALS:
            return None
        return next((i for i in rows if i.label == label and self._believable(i.id)), None)

    async def create(
        self, offer: Offer, actor: str, reason: str, why: str, bid: float | None = None
    ) -> Attempt | None:
        """Rent `offer` (with `bid`: on the interruptible tier); the new attempt, or None when the
        market refused. A refused bid still made an instance, created stopped: it is given up and
        destroyed at once. The create runs to its answer even when its caller is cancelled: its
        rental lands in the fleet, where the release finds it."""
        task = self.journal.writer.spawn(self._create(offer, actor, reason, why, bid))
        self.creating.add(task)
        task.add_done_callback(self.creating.discard)
        return await asyncio.shield(task)

    async def landed(self) -> None:
        """Wait for every create in flight to be answered (its rental is then in the fleet)."""
        while self.creating:
            await asyncio.gather(*list(self.creating), return_exceptions=True)

    async def _create(
        self, offer: Offer, actor: str, reason: str, why: str, bid: float | None
    ) -> Attempt | None:
        j = self.journal
        if j.ledger.unwritable:  # no rental whose create the ledger cannot hold
            j.say(f"create skipped: the ledger cannot be written ({j.ledger.unwritable})")
            return None
        storage_dph = storage_per_hour(self.campaign.disk_gb, offer.storage_cost)
        ctx: dict[str, Any] = {
            "campaign": self.campaign.name,
            "machine_id": offer.machine_id,
            "host_id": offer.host_id,
            "offer_id": offer.id,
            "gpu_name": offer.gpu_name,
            "gpu_dph": offer.gpu_dph if bid is None else bid,
            # in the intent too: an outcome settled after a crash (Recovery) copies it from here
            "storage_dph": storage_dph,
        }
        j.fact(K.OFFER_CHOSEN, None, actor=actor, reason=why, **ctx)
        label = f"{campaign_label(self.campaign.name)}:{secrets.token_hex(5)}"
        # the on-demand price too: what the receipt prices the same work at (`usd_all_on_demand`)
        tier = (
            {}
            if bid is None
            else {"bid": bid, "bid_floor": offer.bid_floor, "on_demand_dph": offer.gpu_dph}
        )
        seq = j.intent(K.CREATE, ctx, actor=actor, reason=reason, detail={"label": label, **tier})
        self.labels_in_flight.add(label)
        try:
            res = await self.market.create_instance(
                offer.id,
                image=self.campaign.image,
                disk_gb=self.campaign.disk_gb,
                label=label,
                exact_label=True,
                onstart=ONSTART,
                **({} if bid is None else {"price": bid}),
            )
        except REFUSALS as exc:
            j.outcome(seq, at=self.market.answered_at(), ok=False, error=str(exc))
            j.say(f"create FAILED on offer {offer.id} m:{offer.machine_id}: {exc}")
            return None
        finally:
            self.labels_in_flight.discard(label)
        if not self._believable(res.instance_id):
            found = await self._by_label(label)
            if found is None:
                why = f"the answer named instance {res.instance_id}, which cannot be new"
                j.outcome(
                    seq,
                    at=self.market.answered_at(),
                    ok=False,
                    error=f"{why}; no instance carries our label",
                )
                j.say(f"create REFUSED on offer {offer.id}: {why}, and none carries our label")
                return None
            j.say(f"create answer named i:{res.instance_id}; our label is on i:{found.id}: taken")
            res = CreateResult(found.id, label, found.start_date)
        at = res.created_at if res.created_at is not None else self.market.answered_at()
        self.fleet.creates += 1
        a = Attempt(
            instance_id=res.instance_id,
            offer=offer,
            machine_id=offer.machine_id,
            host_id=offer.host_id,
            gpu_name=offer.gpu_name,
            created_at=at,
            gpu_dph=offer.gpu_dph if bid is None else bid,
            storage_dph=storage_dph,
            status_since=at,
            label=res.label,
            bid=bid,
            bid_floor=offer.bid_floor,
        )
        j.writer.emit(ChangeTookEffect(a, at, "create"))
        self.fleet.add(a)
        j.outcome(
            seq,
            at=at,
            ok=True,
            instance_id=a.instance_id,
            storage_dph=storage_dph,
            detail={
                "label": res.label,
                "gpu_billing": self.market.gpu_billing,
                # the score the offer listed: the record measures how far it predicts delivery
                "reliability": offer.reliability,
                **tier,
            },
        )
        if res.refused is not None:  # under bid_floor: created stopped, it starts once it wins
            why = f"bid ${bid or 0:.4f}/h refused at create ({res.refused[:160]}): created stopped"
            line = f"create i:{a.instance_id} m:{a.machine_id} {why}: destroyed"
            detail = {"bid": bid, "refused": True}
            await self._cancel(a, actor, why, detail, line, f"abandoned: {why}")
            return None
        if (end := self.ended()) is not None:
            why = f"created after the end ({end[1]})"
            line = f"create i:{a.instance_id} m:{a.machine_id} landed {why}: destroyed"
            await self._cancel(a, end[0], why, line=line)
            return None
        j.say(
            f"create i:{a.instance_id} m:{offer.machine_id} {offer.gpu_name} "
            f"${offer.dph_total:.3f}/h ({self.fleet.creates}/{self.campaign.max_creates}) - {why}"
        )
        if not await self._as_asked(a, offer, actor):
            return None
        return a

    async def _as_asked(self, a: Attempt, offer: Offer, actor: str) -> bool:
        """Show the new rental and check its type and price against the create's
        (`core.bidding.rental_check`); a mismatch is a `rental_mismatch` event with its fix.
        False when it was given up for the rules to rent again."""
        try:
            inst = await self.market.show_instance(a.instance_id)
        except REFUSALS as exc:
            self.journal.say(f"create i:{a.instance_id} not shown ({exc}): its type is unchecked")
            return True
        if inst is None:
            return True
        miss = rental_mismatch(a.bid, offer.gpu_dph, self.campaign.max_dph, inst)
        if miss is None:
            return True
        at = self.market.answered_at()
        detail = {
            "what": miss.what,
            "fix": miss.fix,
            "asked_bid": a.bid,
            "offer_dph": offer.gpu_dph,
            "dph": miss.dph,
            "interruptible": miss.rented_bid,
        }
        self.journal.fact(
            K.RENTAL_MISMATCH, a, at=at, actor=actor, ok=False, reason=miss.reason, detail=detail
        )
        self.journal.say(f"create i:{a.instance_id} NOT AS ASKED: {miss.reason} ({miss.fix})")
        if miss.fix == "rebid" and a.bid is not None:
            ok, why = True, f"the rental is held at ${miss.dph:.4f}/h, asked ${a.bid:.4f}/h"
            try:
                await self.market.change_bid(a.instance_id, a.bid, a.num_gpus)
            except REFUSALS as exc:
                ok, why = False, f"refused ({exc})"
            detail = {"price": a.bid, "old": miss.dph}
            at = self.market.answered_at()
            self.journal.fact(K.REBID, a, at=at, actor=actor, ok=ok, reason=why, detail=detail)
            return True
        if miss.fix == "replace":
            await self._cancel(a, actor, f"not as asked: {miss.reason}", {"mismatch": miss.what})
            return False
        return True

    async def _cancel(
        self,
        a: Attempt,
        actor: str,
        why: str,
        detail: dict[str, Any] | None = None,
        line: str = "",
        destroy_why: str | None = None,
    ) -> None:
        """A new rental the campaign does not keep: given up as cancelled (no fault of its host's)
        and destroyed."""
        at = self.market.answered_at()
        self.journal.writer.emit(GaveUp(a, at, actor, why, "cancelled", detail or {}, line))
        await self.destroy(a, actor, destroy_why or why)
