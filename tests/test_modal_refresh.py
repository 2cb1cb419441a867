"""The fleet keeps drawing under a dialog: with the quit or destroy question open, the panes,
the bar and the log behind it stayed as they were when it opened (the engine looked stalled);
another screen on top (an instance's detail) still hides it, and it is drawn on return."""

from __future__ import annotations

import asyncio
import dataclasses

from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.modals import ChoiceScreen, TypedConfirm
from textual.widgets import RichLog

from .ledgers import new_ledger
from .test_snapshots import FLEET, SIZE, StillEngine


def _later(polls: int, spent: float, line: str):  # more spent, and one more decision
    return dataclasses.replace(
        FLEET,
        now=FLEET.now + 60 * polls,
        spent_usd=spent,
        decisions=(*FLEET.decisions, line),
        decisions_total=FLEET.decisions_total + polls,
    )


def _bar(app: RentwatchApp) -> str:
    return str(app.fleet.query_one("#bar").render())


def _log(app: RentwatchApp) -> str:
    return "\n".join(s.text for s in app.fleet.query_one("#log", RichLog).lines)


def test_the_fleet_is_drawn_under_the_quit_and_destroy_dialogs():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            assert "spent $0.441" in _bar(app)
            asked = (("q", ChoiceScreen, 0.5123), ("d", TypedConfirm, 0.6234))
            for polls, (key, dialog, spent) in enumerate(asked, start=1):
                await pilot.press(key)
                await pilot.pause(0.3)
                assert isinstance(app.screen, dialog)
                app.post_message(FleetSnapshot(_later(polls, spent, f"create after {key}")))
                await pilot.pause(0.4)
                assert isinstance(app.screen, dialog)  # still open, and behind it:
                assert f"spent ${spent:.3f}" in _bar(app)
                assert f"create after {key}" in _log(app)
                await pilot.press("escape")
                await pilot.pause(0.3)

    asyncio.run(run())


def test_a_screen_on_top_still_hides_the_fleet_until_it_closes():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            await pilot.press("enter")  # the selected instance's detail
            await pilot.pause(0.3)
            app.post_message(FleetSnapshot(_later(1, 0.7345, "create under the detail")))
            await pilot.pause(0.4)
            assert "spent $0.441" in _bar(app)  # not drawn where nobody sees it
            await pilot.press("escape")
            await pilot.pause(0.3)
            assert "spent $0.735" in _bar(app)

    asyncio.run(run())
