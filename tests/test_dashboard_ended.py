"""The dashboard once the campaign has ended: its keys offer only what the engine still takes
(`intents.AFTER_END`), `E` with nothing left says so, `q` offers what fits an ended campaign,
and a rental the end destroyed says so on its row."""

from __future__ import annotations

import asyncio
import dataclasses

from rentwatch.engine.hosts.ssh import load_or_create_key
from rentwatch.engine.intents import EndIntent, StopIntent
from rentwatch.views.snapshot import snapshot
from rentwatch.widgets.detail_screen import DetailScreen
from rentwatch.widgets.end_dialog import EndConfirm
from rentwatch.widgets.fleet import FleetTable
from rentwatch.widgets.messages import FleetSnapshot
from textual.app import App, ComposeResult

from .fake_market import FakeMarket
from .test_dashboard import _until
from .test_operator_intent import OFFERS, go, verified
from .test_selection_keys import Recorder, recording_app
from .test_snapshots import FLEET, SIZE

ENDED = "the campaign was ended by a person (end and destroy everything)"


def _ended_with_a_stopped_rental():
    rows = list(FLEET.instances)
    rows[2] = dataclasses.replace(rows[2], phase="stopped", ended_at=4000.0)
    return dataclasses.replace(FLEET, instances=tuple(rows), finished=ENDED), rows[2]


def test_a_start_after_the_end_is_refused_as_a_create_is_and_a_stop_still_goes():
    engine = Recorder()
    fleet, stopped = _ended_with_a_stopped_rental()

    async def run() -> list[str]:
        app, said = recording_app(engine)
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(fleet))
            await pilot.pause(0.3)
            await pilot.press("down", "down")  # the stopped rental
            await pilot.pause(0.2)
            assert app.fleet.check_action("start", ()) is False
            await pilot.press("a")
            await pilot.pause(0.2)
            assert engine.sent == [] and "takes over nothing new" in said[-1]
            app.push_screen(DetailScreen(engine, stopped.instance_id, app.operator))
            await pilot.pause(0.3)
            await pilot.press("a", "H")
            await pilot.pause(0.2)
            assert engine.sent == [] and "takes over nothing new" in said[-1]
            # what lets go of what it holds is still offered
            assert app.screen.check_action("destroy", ()) is True
            await pilot.press("escape", "up", "up")  # back to the fleet, on the one booting
            await pilot.pause(0.2)
            assert app.fleet.check_action("stop", ()) is True
            await pilot.press("s")
            await pilot.pause(0.3)
        return said

    said = asyncio.run(run())
    assert engine.sent == [StopIntent(FLEET.instances[0].instance_id)]
    assert sum("has ended" in s for s in said) == 3


def test_end_on_an_ended_campaign_that_holds_nothing_says_so_and_asks_for_no_name():
    engine = Recorder()
    fleet = dataclasses.replace(FLEET, finished=ENDED)  # the ledger holds none of its rentals

    async def run() -> list[str]:
        app, said = recording_app(engine)
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(fleet))
            await pilot.pause(0.3)
            await pilot.press("E")
            await _until(pilot, lambda: any("nothing left to end" in s for s in said))
            await pilot.pause(0.2)
            assert not isinstance(app.screen, EndConfirm)
        return said

    said = asyncio.run(run())
    assert engine.sent == []
    assert f"{FLEET.campaign} has ended and holds nothing: nothing left to end" in said


class _TableHost(App[None]):
    def compose(self) -> ComposeResult:
        yield FleetTable()


def test_a_stopped_rental_the_end_destroyed_says_so_on_its_row(tmp_path):
    """Stopped by a rule, then destroyed by E: its row kept the stop's reason as its last word."""
    snaps = []

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        assert await sup.actions.stop(sup.attempts[iid], "rule:drained", "no job on it for 1m09s")
        assert "no job on it" in snapshot(sup, market.t).instances[0].left_why
        market.t += 10
        assert (await sup.apply(EndIntent(destroy=True, typed=sup.campaign.name))).destroyed
        snaps.append(next(s for s in snapshot(sup, market.t).instances if s.instance_id == iid))

    go(load_or_create_key(tmp_path / "key"), body, FakeMarket(list(OFFERS)))
    (gone,) = snaps
    assert gone.phase == "destroyed"

    async def run() -> str:
        app = _TableHost()
        async with app.run_test(size=SIZE) as pilot:
            table = app.query_one(FleetTable)
            table.show((gone,))
            await pilot.pause()
            return str(table.get_row(str(gone.instance_id))[FleetTable.COLUMNS.index("status")])

    status = asyncio.run(run())
    assert status.startswith("the campaign was ended by a person") and "no job" not in status
