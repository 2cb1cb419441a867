"""The operator's intents carried out: stop, start, destroy (with its typed confirmation, the
only way a proven instance is ever destroyed) and one more create."""

from __future__ import annotations

from .actions import Actions
from .attempt import Attempt
from .fleet import Fleet
from .intents import (
    AutomationRefused,
    CreateIntent,
    DestroyConfirmation,
    DestroyIntent,
    Intent,
    StartIntent,
    StopIntent,
)
from .journal import Journal
from .offers import OfferBook

HUMAN = "human"


class Operator:
    def __init__(self, actions: Actions, fleet: Fleet, offers: OfferBook, journal: Journal) -> None:
        self.actions = actions
        self.fleet = fleet
        self.offers = offers
        self.journal = journal

    async def apply(self, intent: Intent) -> bool:
        """Carry out an intent; raises `AutomationRefused` when it may not be."""
        if isinstance(intent, DestroyIntent):
            return await self._destroy(intent.confirmation, intent.reason)
        if isinstance(intent, StopIntent):
            return await self.actions.stop(self._held(intent.instance_id), HUMAN, intent.reason)
        if isinstance(intent, StartIntent):
            await self.actions.start(self._held(intent.instance_id), HUMAN, intent.reason)
            self.journal.say(f"start  i:{intent.instance_id} by human")
            return True
        if isinstance(intent, CreateIntent):
            return await self._create(intent.reason)
        raise AutomationRefused(f"unknown intent {intent!r}")

    def _held(self, instance_id: int) -> Attempt:
        a = self.fleet.get(instance_id)
        if a is None:
            raise AutomationRefused(f"instance {instance_id} is not held by this campaign")
        return a

    async def _destroy(self, confirmation: DestroyConfirmation, reason: str) -> bool:
        """The only path that may destroy a verified instance: the operator typed its id."""
        if not confirmation.valid():
            raise AutomationRefused(f"destroy of {confirmation.instance_id} not confirmed")
        a = self._held(confirmation.instance_id)
        if a.preflight_task:
            a.preflight_task.cancel()
        return await self.actions.destroy(a, HUMAN, reason)

    async def _create(self, reason: str) -> bool:
        if self.offers.stale():
            await self.offers.refresh()
        best = self.offers.best()
        if best is None:
            self.journal.say("create skipped: no fit offer (price, CUDA, quarantine)")
            return False
        offer, why = best
        rented = await self.actions.create(offer, HUMAN, reason, why)
        self.offers.tried(offer)
        return rented is not None
