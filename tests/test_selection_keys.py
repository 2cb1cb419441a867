"""Keys act on the instance the operator sees: selection is by instance id in both views,
across re-sorts, replacements and a switch of view; `s` on a host with a running job, or on
one whose stop lowers the wanted fleet, asks first and says so."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses

from rentwatch.engine.intents import Reply, StopIntent
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.fleet import FleetTable, FleetView
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.modals import ChoiceScreen, DestroyConfirm

from .ledgers import new_ledger
from .test_snapshots import FLEET, SIZE, StillEngine, _inst


class Recorder(StillEngine):
    def __init__(self) -> None:
        self.sent: list = []

    def submit(self, intent):  # type: ignore[no-untyped-def]
        self.sent.append(intent)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_result(Reply(True, "done"))
        return fut


def recording_app(engine: Recorder) -> tuple[RentwatchApp, list[str]]:
    """A dashboard on `engine` whose toasts are kept, in order, in the list beside it."""
    app = RentwatchApp(engine, new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
    said: list[str] = []
    app.notify = lambda text, **kw: said.append(str(text))  # type: ignore[method-assign]
    return app, said


def _working_with_job():
    rows = list(FLEET.instances)
    rows[1] = dataclasses.replace(rows[1], job="demo-2: step 40/100 loss 1.93")
    return dataclasses.replace(FLEET, instances=tuple(rows))


def test_the_table_keeps_the_cursor_on_the_instance_across_resorts_and_replacements():
    engine = Recorder()

    async def run() -> None:
        app = RentwatchApp(engine, new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            await pilot.press("t")
            await pilot.pause(0.3)
            table = app.query_one(FleetTable)
            await pilot.press("down", "down")
            await pilot.pause(0.2)
            chosen = table.selected_id
            assert chosen == FLEET.instances[2].instance_id
            # a replacement arrives on top, a row above goes, and the order turns round
            fresh = _inst(9, created_at=2000.0)
            rows = (fresh, *reversed(FLEET.instances[1:]))
            app.post_message(FleetSnapshot(dataclasses.replace(FLEET, instances=rows)))
            await pilot.pause(0.3)
            assert table.selected_id == chosen
            assert table.cursor_row == [s.instance_id for s in rows].index(chosen)
            await pilot.press("d")
            await pilot.pause(0.3)
            assert isinstance(app.screen, DestroyConfirm)
            assert app.screen.snap.instance_id == chosen
            await pilot.press("escape")
            await pilot.pause(0.2)
            # the pane view shows the same instance selected, and back again
            await pilot.press("t")
            await pilot.pause(0.3)
            assert app.query_one(FleetView).selected_id == chosen
            await pilot.press("up")
            await pilot.press("t")
            await pilot.pause(0.3)
            assert table.selected_id == app.query_one(FleetView).selected_id != chosen

    asyncio.run(run())


def test_stop_on_a_host_with_a_job_asks_naming_it_and_the_smaller_fleet():
    engine = Recorder()
    fleet = _working_with_job()
    worker = fleet.instances[1]

    async def run() -> None:
        app = RentwatchApp(engine, new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(fleet))
            await pilot.pause(0.3)
            await pilot.press("down", "s")
            await pilot.pause(0.3)
            assert isinstance(app.screen, ChoiceScreen) and app.screen.purpose == "stop"
            text = app.screen.text
            assert f"Stop instance {worker.instance_id}" in text
            assert "Its job demo-2 is running" in text
            assert "the wanted fleet goes 3 -> 2" in text
            await pilot.press("enter")  # Cancel is focused: one stray key stops nothing
            await pilot.pause(0.3)
            assert engine.sent == [] and len(app.screen_stack) == 1
            await pilot.press("s")
            await pilot.pause(0.3)
            await pilot.click("#stop")
            await pilot.pause(0.3)
            assert engine.sent == [StopIntent(worker.instance_id)]
            # a booting instance: no job, not in service, nothing to ask
            await pilot.press("up", "s")
            await pilot.pause(0.3)
            assert len(app.screen_stack) == 1
            assert engine.sent[-1] == StopIntent(fleet.instances[0].instance_id)

    asyncio.run(run())


def test_a_verified_idle_host_asks_because_the_fleet_shrinks():
    from rentwatch.widgets.modals import stop_choice

    idle = FLEET.instances[2]  # verified, no job
    question = stop_choice(idle, 3)
    assert question is not None and "3 -> 2" in question.text and "job" not in question.text
    assert stop_choice(idle, 0) is None  # a wanted fleet of 0 is not lowered
    assert stop_choice(dataclasses.replace(idle, supervised=False), 3) is None
