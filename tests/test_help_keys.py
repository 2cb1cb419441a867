"""The help and the command palette are read from the bindings, so a key is written once: on
every screen the help lists each of the screen's own keys and the app's that act there, and
no key that is not bound there; the palette offers the same actions."""

from __future__ import annotations

import asyncio

import pytest
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.detail_screen import DetailScreen
from rentwatch.widgets.fleet_screen import FleetScreen
from rentwatch.widgets.jobs_screen import JobOutputScreen, JobsScreen
from rentwatch.widgets.keys import key_lines
from rentwatch.widgets.ledger_screen import LedgerScreen
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.modals import HelpScreen
from rentwatch.widgets.receipt_screen import ReceiptScreen
from textual.binding import Binding

from .conftest import played_once
from .ledgers import new_ledger
from .test_jobs_screen import JobsEngine
from .test_snapshots import FLEET

# how each screen is reached from the fleet, and the screen it is
SCREENS = {
    "fleet": ((), FleetScreen),
    "table": (("t",), FleetScreen),
    "detail": (("enter",), DetailScreen),
    "jobs": (("j",), JobsScreen),
    "output": (("j", "enter"), JobOutputScreen),
    "ledger": (("l",), LedgerScreen),
    "receipt": (("r",), ReceiptScreen),
}


def _keys(binding: Binding) -> list[str]:
    return [k.strip() for k in binding.key.split(",")]


async def _open(keys: tuple[str, ...]):  # type: ignore[no-untyped-def]
    app = RentwatchApp(JobsEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
    ctx = app.run_test(size=(140, 40))
    pilot = await ctx.__aenter__()
    app.post_message(FleetSnapshot(FLEET))
    await pilot.pause(0.3)
    for k in keys:
        await pilot.press(k)
        await pilot.pause(0.3)
    return app, ctx, pilot


@pytest.mark.parametrize("name", list(SCREENS))
def test_the_help_lists_every_key_the_screen_answers_and_no_other(name):
    keys, kind = SCREENS[name]

    async def run() -> None:
        app, ctx, pilot = await _open(keys)
        try:
            screen = app.screen
            assert isinstance(screen, kind), screen
            active = screen.active_bindings
            lines = key_lines(screen)
            listed = {k for line in lines for k in line.bound}
            # no key that is not bound here
            assert listed <= set(active), listed - set(active)
            # every key of the screen's own, each of its widgets' own, and the app's that
            # this screen does not bind to something else
            own = [b for b in type(screen).BINDINGS if isinstance(b, Binding)]
            for b in own:
                for k in _keys(b):
                    if k in active and active[k].node is screen:
                        assert k in listed, (name, k)
            shadowed = {k for k, a in active.items() if a.node is not app}
            for b in RentwatchApp.BINDINGS:
                assert isinstance(b, Binding)
                for k in _keys(b):
                    if k in active and k not in shadowed:
                        assert k in listed, (name, k)
            mine = {k for b in own for k in _keys(b)}
            assert mine & listed, name  # the screen's own keys are there at all
            # the help modal shows each line, its keys and what it does
            await pilot.press("question_mark")
            await pilot.pause(0.3)
            if name != "ledger":  # the SQL editor takes `?` as text: ctrl+p is the way there
                assert isinstance(app.screen, HelpScreen)
                text = app.screen.text
                for line in lines:
                    assert " ".join(line.keys) in text and line.text in text, line
            # and the command palette offers the same actions, by the same titles (a group,
            # the sort keys 1..9, as each of its keys)
            titles = {c.title for c in app.get_system_commands(screen)}
            for line in key_lines(screen, grouped=False):
                if line.action != "command_palette":
                    assert line.text in titles, line
        finally:
            await ctx.__aexit__(None, None, None)

    asyncio.run(run())


async def _tour() -> dict[str, list[str]]:
    """The keys the help lists on each screen, in one app: each screen opened from the fleet,
    read, and closed back to the fleet (the SQL editor keeps escape, so the ledger is last)."""
    seen: dict[str, list[str]] = {}
    app, ctx, pilot = await _open(())
    try:
        for name in sorted(SCREENS, key=lambda n: n == "ledger"):
            for k in SCREENS[name][0]:
                await pilot.press(k)
                await pilot.pause(0.3)
            assert isinstance(app.screen, SCREENS[name][1]), (name, app.screen)
            seen[name] = sorted({k for line in key_lines(app.screen) for k in line.bound})
            for _ in range(5):
                if len(app.screen_stack) == 1:
                    break
                await pilot.press("escape")
                await pilot.pause(0.3)
            if name == "table":
                await pilot.press("t")  # back to the panes
                await pilot.pause(0.3)
    finally:
        await ctx.__aexit__(None, None, None)
    return seen


def help_keys(factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Each screen's keys on its help, read once for the test run (every worker reads it)."""
    seen = played_once(factory, "help-keys", lambda: asyncio.run(_tour()))
    return {name: set(keys) for name, keys in seen.items()}


def test_every_screen_binding_reaches_the_help_with_all_offered(tmp_path_factory):
    """Each BINDINGS entry of each screen, and the app's, is on the help of the screen it
    belongs to (with a fleet in which every key acts)."""
    seen = help_keys(tmp_path_factory)
    for name, (_, kind) in SCREENS.items():
        for b in kind.BINDINGS:
            assert isinstance(b, Binding)
            for k in _keys(b):
                assert k in seen[name], (name, k)
    for b in RentwatchApp.BINDINGS:
        assert isinstance(b, Binding)
        for k in _keys(b):
            assert k in seen["fleet"], k
