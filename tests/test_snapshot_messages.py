"""The engine's snapshots reach the screens as messages: posted from the engine's thread,
heard by the app, forwarded to the fleet screen, which draws the newest once it is in sight
again (never under another screen), and a queued snapshot gives way to a newer one."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.detail_screen import DetailScreen
from rentwatch.widgets.messages import EngineFailed, FleetSnapshot
from textual.widgets import Static

from .ledgers import new_ledger
from .test_snapshots import FLEET, SIZE, StillEngine


def _bar(app: RentwatchApp) -> str:
    return str(app.fleet.query_one("#bar", Static).render())


async def _until(pilot, cond, ceiling_s: float = 30.0) -> None:
    """Let the app run until `cond` holds (a ceiling, not a timing: a loaded box is slow)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ceiling_s
    while not cond():
        assert loop.time() < deadline, "never came"
        await pilot.pause(0.05)


def test_a_snapshot_from_the_engines_thread_is_drawn_and_waits_behind_another_screen():
    engine = StillEngine()
    later = dataclasses.replace(FLEET, campaign="second-campaign")

    async def run() -> None:
        app = RentwatchApp(engine, new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            # as the engine thread calls it: from a thread of its own
            sender = threading.Thread(target=engine.on_snapshot, args=(FLEET,))
            sender.start()
            sender.join()
            await _until(pilot, lambda: app.fleet._shown is FLEET)
            assert app.latest is FLEET
            assert "qlora-sweep" in _bar(app)
            await pilot.press("enter")
            await _until(pilot, lambda: isinstance(app.screen, DetailScreen))
            engine.on_snapshot(later)
            await _until(pilot, lambda: app.fleet.latest is later)
            await pilot.pause(0.3)  # refreshes that would draw it, were it drawn under the detail
            # heard, forwarded, not drawn under the detail
            assert app.latest is later
            assert app.fleet._shown is FLEET and "second-campaign" not in _bar(app)
            await pilot.press("escape")
            await _until(pilot, lambda: app.fleet._shown is later)
            assert "second-campaign" in _bar(app)

    asyncio.run(run())


def test_a_queued_snapshot_gives_way_to_a_newer_one_and_a_failure_does_not():
    a, b = FleetSnapshot(FLEET), FleetSnapshot(FLEET)
    assert b.can_replace(a)
    assert not EngineFailed("x").can_replace(a) and not b.can_replace(EngineFailed("x"))
