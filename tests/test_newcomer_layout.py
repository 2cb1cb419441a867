"""What a newcomer's pass in tmux found at 80x24 and 120x36 (issue 29): the fleet's last pane
lost its last line to a horizontal scrollbar, the footer showed a stray cell after "^p palette",
one long reason in the table pushed the billed column off a 120-column screen for good, and the
table's footer did not offer Enter."""

from __future__ import annotations

import asyncio
import dataclasses

from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.fleet import FleetTable, FleetView
from rentwatch.widgets.footer import fitted
from rentwatch.widgets.messages import FleetSnapshot
from textual.widgets import Footer

from .test_pictures import StillLedger
from .test_snapshots import FLEET, StillEngine, _text, _utc  # noqa: F401

LONG = (
    "fatal status line: 'pull access denied for vastai/broken-image, repository does not "
    "exist or may require docker login: denied: requested access to the resource is denied'"
)


async def _app(size: tuple[int, int], keys: tuple[str, ...] = (), fleet=FLEET):
    app = RentwatchApp(StillEngine(), StillLedger(), refresh_s=0.05)  # type: ignore[arg-type]
    ctx = app.run_test(size=size)
    pilot = await ctx.__aenter__()
    app.post_message(FleetSnapshot(fleet))
    await pilot.pause(0.3)
    for k in keys:
        await pilot.press(k)
        await pilot.pause(0.3)
    for _ in range(50):  # a loaded machine may not have laid the footer out yet
        keys_shown = app.screen.query_one(Footer).query("FooterKey")
        if (
            keys_shown
            and fitted(app.screen)
            and all(k.region.width for k in keys_shown if k.display)
        ):
            break
        await pilot.pause(0.1)
    view = app.query_one(FleetView)
    for _ in range(50):  # and may not have laid the panes out either (CI under load)
        if view.snaps and view.size.height and view.virtual_size.height >= len(view.snaps):
            break
        await pilot.pause(0.1)
    await pilot.pause(0.1)
    return app, ctx


def test_panes_never_get_a_horizontal_scrollbar_and_the_footer_ends_at_the_palette():
    async def run():
        app, ctx = await _app((80, 24))
        try:
            view = app.query_one(FleetView)
            assert view.show_vertical_scrollbar  # more panes than fit: it scrolls down
            assert not view.show_horizontal_scrollbar  # and never sideways (a lost line)
            right = 0
            for _ in range(50):  # the footer is composed again as bindings change: its last
                footer = app.screen.query_one(Footer)
                keys = [k for k in footer.query("FooterKey") if k.has_class("-command-palette")]
                if keys and (right := keys[0].region.right):
                    break
                await asyncio.sleep(0.1)
            assert right == app.size.width
        finally:
            await ctx.__aexit__(None, None, None)

    asyncio.run(run())


def test_a_long_reason_does_not_push_billed_off_the_table_and_enter_is_offered():
    dead = dataclasses.replace(
        FLEET.instances[-1], phase="destroyed", ended_at=4000.0, left_why=LONG
    )
    fleet = dataclasses.replace(FLEET, instances=(*FLEET.instances[:-1], dead))

    async def run():
        app, ctx = await _app((120, 36), ("t",), fleet)
        try:
            table = app.query_one(FleetTable)
            assert not table.show_horizontal_scrollbar  # every column in sight, billed too
            widths = {c.key.value: c.get_render_width(table) for c in table.columns.values()}
            assert sum(widths.values()) <= table.scrollable_content_region.width
            row = table.get_row(str(dead.instance_id))
            status = row[FleetTable.COLUMNS.index("status")]
            assert status.endswith("…") and status.startswith("fatal status line")
            keys = [k.key for k in app.screen.query_one(Footer).query("FooterKey")]
            assert "enter" in keys  # Detail, as in the pane view
        finally:
            await ctx.__aexit__(None, None, None)

    asyncio.run(run())


def test_the_ledger_screen_names_every_canned_key_at_80_columns():
    async def run():
        app, ctx = await _app((80, 24), ("l",))
        try:
            for _ in range(50):
                text = _text(app.export_screenshot())
                if "row(s)" in text or "query failed" in text:
                    break
                await asyncio.sleep(0.1)
            lines = text.splitlines()
            for key in ("F2 receipt", "F3 duds", "F4 dud cost", "F5 a machine", "F6 throttled"):
                assert any(key in line for line in lines[:-1]), (key, text)
            footer = lines[-1]  # what acts on the query, whole: the F-keys are named above
            for key in ("Run", "esc", "Export"):
                assert key in footer, (key, footer)
        finally:
            await ctx.__aexit__(None, None, None)

    asyncio.run(run())
