"""The layout at 80x24, 120x36 and 200x50 (issue 29 item 4): the bar wraps a field at a time,
never inside one; the footer shows the keys that act first; a decision's reason is wrapped, not
cut where its why is; the log takes the room the fleet does not need; every screen scrolls
from the keyboard. Each view's text at each size is kept in tests/snapshots/sizes/
(RENTWATCH_UPDATE_SNAPSHOTS=1 rewrites them after an intended change)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re

import pytest
from rentwatch.ledger import Ledger
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.footer import fitted
from rentwatch.widgets.header import budget_cells, fleet_fields
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.render import campaign_fields
from textual.containers import VerticalScroll

from .test_pictures import StillLedger
from .test_snapshots import FLEET, HERE, StillEngine, _text, _utc  # noqa: F401

SIZES = ((80, 24), (120, 36), (200, 50))
# A scrollbar's thumb shows in text only as the block glyph at its fractional end, and where
# that falls depends on when the last layout ran (CI caught one frame without it): the
# snapshots keep the text, not the thumb. A run of partial blocks against the border is one.
THUMB = re.compile(r"(?<=[^\u2581-\u2588 ])[\u2581-\u2587]+(?=│$)", re.MULTILINE)


def _without_thumbs(text: str) -> str:
    return THUMB.sub("", text)


VIEWS = {
    "fleet": (),
    "table": ("t",),
    "detail": ("down", "enter"),
    "receipt": ("r",),
    "help": ("question_mark",),
    "quit": ("q",),
}


async def _drive(size: tuple[int, int], keys: tuple[str, ...], then: tuple[str, ...] = ()):
    app = RentwatchApp(StillEngine(), StillLedger(), refresh_s=0.05)  # type: ignore[arg-type]
    async with app.run_test(size=size) as pilot:
        app.post_message(FleetSnapshot(FLEET))
        await pilot.pause(0.3)
        for k in keys:
            await pilot.press(k)
            await pilot.pause(0.4)
        for _ in range(50):  # a loaded machine may not have drawn the footer yet
            if "palette" in (text := _text(app.export_screenshot())) and fitted(app.screen):
                break
            await pilot.pause(0.1)
        scrolled = None
        if then:
            box = app.screen.query(VerticalScroll).first()
            for k in then:
                await pilot.press(k)
                await pilot.pause(0.3)
            scrolled = (box.scroll_y, box.max_scroll_y)
        return text, scrolled


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("view", list(VIEWS))
def test_each_view_at_each_size(view, size):
    text, _ = asyncio.run(_drive(size, VIEWS[view]))
    text = _without_thumbs(text)
    path = HERE / "sizes" / f"{view}-{size[0]}x{size[1]}.txt"
    if os.environ.get("RENTWATCH_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), (
        f"no reference {path}; inspect the view and set RENTWATCH_UPDATE_SNAPSHOTS=1"
    )
    assert text == path.read_text(), (
        f"{path.name} changed; inspect and set RENTWATCH_UPDATE_SNAPSHOTS=1"
    )
    lines = text.splitlines()
    if view in ("fleet", "table"):
        # the bar never splits a field: each one is whole on some line of it
        cells = budget_cells(size[0])  # the budget bar's, as the dashboard draws it
        for field in (*campaign_fields(FLEET), *fleet_fields(FLEET, "new", "", cells)):
            word = field.plain.strip()
            assert any(word in line for line in lines[:6]), (word, lines[:6])
        footer = lines[-1]
        for key in ("q Quit", "s Stop", "d Destroy", "a Start", "palette"):
            assert key in footer, (key, footer)
    if view == "table":  # the money columns in sight at every size, the status from 100
        head = next(line for line in lines if line.startswith(" id ")).split()
        want = {"id", "gpu", "phase", "util", "throttle", "billed"} | (
            {"status"} if size[0] >= 100 else set()
        )
        assert want <= set(head), head
    if view == "fleet":
        assert "found'" in text  # the decision's reason is wrapped, never cut short
        assert "(unchanged 1m10s / 1m30s)" in text  # the freeze timer before the market's text


@pytest.mark.parametrize("view", ["detail", "receipt", "help"])
def test_each_screen_scrolls_from_the_keyboard_at_80x24(view):
    _, (y, most) = asyncio.run(_drive((80, 24), VIEWS[view], ("end",)))
    assert most > 0 and y == most


def test_the_log_takes_what_the_fleet_leaves_at_200x50():
    async def run() -> tuple[int, int]:
        app = RentwatchApp(StillEngine(), Ledger(":memory:"), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(200, 50)) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            for _ in range(100):  # the panes are laid out a refresh or two later (slower loaded)
                await pilot.pause(0.05)
                fleet = app.query_one("FleetView").size.height
                log = app.query_one("#log").size.height
                if fleet >= len(FLEET.instances) * 4 and log > 9:
                    break
            return fleet, log

    fleet, log = asyncio.run(run())
    assert fleet >= len(FLEET.instances) * 4  # every pane whole
    assert log > 9  # more than the old fixed height: no half-empty screen


def test_billed_stays_in_sight_at_80_columns_with_real_ids_and_temperatures():
    """Vast's ids are 10 digits and a running card shows its temperature: at 80 columns the
    throttle gives way so billed stays on screen (a newcomer's pass caught `bille`)."""
    wide = tuple(
        dataclasses.replace(
            s,
            instance_id=6099634470 + k,
            phase="verifying" if k == 0 else s.phase,
            util=s.util if s.util is not None else 97.0,
            temp_c=75.0,
            machine_id=31832 + k,
            dph=0.1754,
            # a booting rental bills storage only: its rate to a hundredth of a cent
            dph_now=0.0062 if k == 0 else None,
            gpu_billing_now=k != 0,
        )
        for k, s in enumerate(FLEET.instances)
    )
    fleet = dataclasses.replace(FLEET, instances=wide)

    async def drive() -> str:
        app = RentwatchApp(StillEngine(), StillLedger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(80, 24)) as pilot:
            app.post_message(FleetSnapshot(fleet))
            await pilot.pause(0.3)
            await pilot.press("t")
            for _ in range(50):
                text = _text(app.export_screenshot())
                if "verifying" in text:
                    break
                await pilot.pause(0.1)
            return text

    head = next(line for line in asyncio.run(drive()).splitlines() if line.startswith(" id "))
    assert {"id", "gpu", "phase", "util", "throttle", "billed"} <= set(head.split()), head
