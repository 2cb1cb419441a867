"""The layout at 80x24, 120x36 and 200x50 (issue 29 item 4): the bar wraps a field at a time,
never inside one; the footer shows the keys that act first (End among them); a decision's reason is wrapped, not
cut where its why is; the log takes the room the fleet does not need; every screen scrolls
from the keyboard. Each view's text at each size is kept in tests/snapshots/sizes/
(RENTWATCH_UPDATE_SNAPSHOTS=1 rewrites them after an intended change)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re

import pytest
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.footer import fitted
from rentwatch.widgets.header import budget_cells, fleet_fields
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.render import campaign_fields
from textual.containers import VerticalScroll

from .conftest import played_once
from .test_pictures import StillLedger
from .test_snapshots import FLEET, HERE, StillEngine, _back_to_fleet, _text, _utc  # noqa: F401

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


SCROLLED = ("detail", "receipt", "help")  # scrolled to their end from the keyboard at 80x24


def _open(app: RentwatchApp, view: str, text: str) -> bool:
    """Whether `view` is the one on screen: its keys' screen pushed (or, for the table, its
    header drawn), not the fleet still showing while a loaded box handles the keys."""
    if view == "table":
        return any(line.startswith(" id ") for line in text.splitlines())
    return (len(app.screen_stack) > 1) == bool(VIEWS[view])


async def _settled(app: RentwatchApp, pilot, view: str = "fleet") -> str:
    """The screen's text once `view` is open and two frames alike, the footer's palette key
    drawn (or, where the view covers the footer, five frames alike): a condition, not a count
    of frames (loaded, a fixed wait took the fleet's text for help's)."""
    last, alike = None, 0
    for _ in range(600):  # a ceiling for a box stuck for good, not a timing
        text = _text(app.export_screenshot())
        ready = fitted(app.screen) and _open(app, view, text)
        alike = alike + 1 if ready and text == last else 0
        if alike >= (1 if "palette" in text else 5):
            break
        last = text if ready else None
        await pilot.pause(0.1)
    return text


async def _tour(size: tuple[int, int]) -> dict[str, dict]:
    """Every view at one size in one app: each opened from the fleet by its keys, its text
    taken (and, at 80x24, scrolled to its end with `end`), then closed back to the fleet."""
    app = RentwatchApp(StillEngine(), StillLedger(), refresh_s=0.05)  # type: ignore[arg-type]
    seen: dict[str, dict] = {}
    async with app.run_test(size=size) as pilot:
        app.post_message(FleetSnapshot(FLEET))
        await pilot.pause(0.3)
        for view, keys in VIEWS.items():
            for k in keys:
                await pilot.press(k)
                await pilot.pause(0.4)
            seen[view] = {"text": await _settled(app, pilot, view)}
            if view == "fleet":
                for _ in range(100):  # the panes are laid out a refresh or two later (loaded)
                    fleet = app.query_one("FleetView").size.height
                    log = app.query_one("#log").size.height
                    if fleet >= len(FLEET.instances) * 4 and log > 9:
                        break
                    await pilot.pause(0.05)
                seen[view]["heights"] = [fleet, log]
            if view in SCROLLED and size == (80, 24):
                box = app.screen.query(VerticalScroll).first()
                await pilot.press("end")
                await pilot.pause(0.3)
                seen[view]["scrolled"] = [box.scroll_y, box.max_scroll_y]
            await _back_to_fleet(app, pilot, view)
    return seen


def _seen(factory, size: tuple[int, int]) -> dict[str, dict]:
    """The tour at `size`, made once for the run: the tests below only read its views."""
    return played_once(factory, f"layout-{size[0]}x{size[1]}", lambda: asyncio.run(_tour(size)))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("view", list(VIEWS))
def test_each_view_at_each_size(view, size, tmp_path_factory):
    text = _without_thumbs(_seen(tmp_path_factory, size)[view]["text"])
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
        for key in (
            "q Quit",
            "? Help",
            "E End",
            "⏎ Detail",
            "s Stop",
            "d Destroy",
            "a Start",
            "palette",
        ):
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
def test_each_screen_scrolls_from_the_keyboard_at_80x24(view, tmp_path_factory):
    y, most = _seen(tmp_path_factory, (80, 24))[view]["scrolled"]
    assert most > 0 and y == most


def test_the_log_takes_what_the_fleet_leaves_at_200x50(tmp_path_factory):
    fleet, log = _seen(tmp_path_factory, (200, 50))["fleet"]["heights"]
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
            return await _settled(app, pilot, "table")

    head = next(line for line in asyncio.run(drive()).splitlines() if line.startswith(" id "))
    assert {"id", "gpu", "phase", "util", "throttle", "billed"} <= set(head.split()), head
