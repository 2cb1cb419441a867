"""The command palette offers each act once, by our name for it: Textual's own "Quit" and
"Keys" stood beside "Quit (asks)" and "Help: the keys", and its "Quit" was one more door out
that had to be kept from skipping the stop / leave running question."""

from __future__ import annotations

import asyncio

from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.modals import ChoiceScreen, HelpScreen

from .ledgers import new_ledger
from .test_snapshots import FLEET, SIZE, StillEngine


def test_the_palette_has_our_quit_and_help_and_not_textuals():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            for keys in ((), ("l",), ("r",), ("j",)):  # the fleet, then each screen on top
                await pilot.press(*keys)
                await pilot.pause(0.3)
                commands = {c.title: c for c in app.get_system_commands(app.screen)}
                assert "Quit" not in commands and "Keys" not in commands, keys
                assert "Quit (asks)" in commands and "Help: the keys" in commands, keys
                assert "Theme" in commands  # what has no key of ours stays
            await commands["Help: the keys"].callback()  # type: ignore[misc]
            await pilot.pause(0.3)
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("escape")
            await pilot.pause(0.3)
            await commands["Quit (asks)"].callback()  # type: ignore[misc]
            await pilot.pause(0.3)
            assert app.is_running
            assert isinstance(app.screen, ChoiceScreen) and app.screen.purpose == "quit"

    asyncio.run(run())
