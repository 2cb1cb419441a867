"""Keys a newcomer pressed in tmux (issue 29): `a` on a host at work said "started" while the
engine wrote an illegal move (verified -> booting) into the ledger; it starts only a stopped
rental now, and says why not otherwise."""

from __future__ import annotations

import asyncio
import dataclasses

from rentwatch.engine.intents import StartIntent
from rentwatch.ledger import Ledger
from rentwatch.widgets.app import RentwatchApp

from .test_selection_keys import Recorder
from .test_snapshots import FLEET, SIZE


def test_start_sends_nothing_for_a_running_host_and_starts_a_stopped_one():
    engine = Recorder()
    rows = list(FLEET.instances)
    rows[2] = dataclasses.replace(rows[2], phase="stopped", ended_at=4000.0)
    fleet = dataclasses.replace(FLEET, instances=tuple(rows))

    async def run() -> list[str]:
        app = RentwatchApp(engine, Ledger(":memory:"), refresh_s=0.05)  # type: ignore[arg-type]
        said: list[str] = []
        app.notify = lambda text, **kw: said.append(str(text))  # type: ignore[method-assign]
        async with app.run_test(size=SIZE) as pilot:
            app.latest = fleet
            await pilot.pause(0.3)
            await pilot.press("j")  # the host at work
            await pilot.pause(0.2)
            await pilot.press("a")
            await pilot.pause(0.3)
            assert engine.sent == []
            await pilot.press("j")  # the stopped one
            await pilot.pause(0.2)
            await pilot.press("a")
            await pilot.pause(0.3)
        assert engine.sent == [StartIntent(rows[2].instance_id)]
        return said

    said = asyncio.run(run())
    assert f"{rows[1].instance_id} is working: nothing to start" in " ".join(said)
