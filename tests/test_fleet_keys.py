"""[K] The operator's keys for the fleet and for what is not rentwatch's, without a market:
`+`/`-` send the wanted fleet size, the palette hands an observed instance over (once the
operator confirms), and the quit dialog counts only what rentwatch supervises."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
from typing import Any

from rentwatch.engine.intents import FleetSizeIntent, HandOverIntent, Reply
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.fleet import FleetView
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.modals import ChoiceScreen
from textual.widgets import Static

from .ledgers import new_ledger
from .test_snapshots import FLEET, SIZE


class RecordingEngine:
    on_snapshot = None
    on_error = None
    ended = None
    end_hint = ""
    outlives_dashboard = False

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def start(self) -> None:
        pass

    def shutdown(self, mode: str = "stop") -> None:
        pass

    def submit(self, intent: Any) -> concurrent.futures.Future[Any]:
        self.sent.append(intent)
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        fut.set_result(Reply(True, "done"))
        return fut


def _observed_fleet():
    first, *rest = FLEET.instances
    theirs = dataclasses.replace(first, supervised=False, phase="running", status="running")
    return dataclasses.replace(
        FLEET, instances=(theirs, *rest), observed=1, observed_dph=theirs.dph
    )


def test_plus_minus_send_the_fleet_size_and_hand_over_sends_its_intent():
    engine = RecordingEngine()
    app = RentwatchApp(engine, new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
    snap = _observed_fleet()

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(snap))
            await pilot.pause(0.3)
            await pilot.press("plus")
            await pilot.press("minus")
            await pilot.pause(0.2)
            app.query_one(FleetView).cursor = 0
            sent = len(engine.sent)
            app.fleet.action_hand_over()  # it asks first, saying what hand-over means
            await pilot.pause(0.2)
            dialog = app.screen
            assert isinstance(dialog, ChoiceScreen) and dialog.purpose == "hand_over"
            assert "destroy" in dialog.text and "did not create" in dialog.text
            await pilot.press("enter")  # Cancel is focused: one stray key hands nothing over
            await pilot.pause(0.2)
            assert not isinstance(app.screen, ChoiceScreen) and len(engine.sent) == sent
            app.fleet.action_hand_over()
            await pilot.pause(0.2)
            await pilot.click("#hand_over")
            await pilot.pause(0.2)
            bar = str(app.query_one("#bar", Static).render())
            assert "not rentwatch's 1" in bar
            live = sum(1 for s in snap.instances if s.ended_at is None)
            assert app.latest.held == live - 1  # quit's count leaves out what is not ours

    asyncio.run(run())
    iid = snap.instances[0].instance_id
    assert engine.sent == [
        FleetSizeIntent(FLEET.fleet + 1),
        FleetSizeIntent(FLEET.fleet - 1),
        HandOverIntent(iid),
    ]


def test_minus_at_a_wanted_fleet_of_0_sends_nothing():
    # a newcomer's `-` past 0 recorded "fleet 0 -> 0 by human" in the ledger
    engine = RecordingEngine()
    app = RentwatchApp(engine, new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]

    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(dataclasses.replace(FLEET, fleet=0)))
            await pilot.pause(0.3)
            await pilot.press("minus")
            await pilot.pause(0.2)

    asyncio.run(run())
    assert engine.sent == []
