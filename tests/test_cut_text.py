"""Text a newcomer found cut: at 80x24 a pane's billed figure (a long GPU name and a storage-only
rate pushed it past the edge), and at 120 columns the bar, whose first line wrapped to a short
second one before its own second line (three lines where two hold it)."""

from __future__ import annotations

import asyncio
import dataclasses

from rentwatch.ledger import Ledger
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.header import WIDE, budget_cells, fleet_fields, wrap_fields
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.render import campaign_fields, pane_lines

from .test_snapshots import FLEET, StillEngine, _inst

# a storage-only rate and a long GPU name: the head line ran to 97 cells
LONG = _inst(
    9,
    instance_id=6102138109,
    gpu_name="RTX 3060 Ti",
    machine_id=41121,
    host_id=41722,
    dph_now=0.0106,
    gpu_billing_now=False,
    billed_usd=0.0005,
)
DEMO = dataclasses.replace(
    FLEET,
    campaign="demo-2",
    creates=6,
    max_creates=30,
    duds=3,
    dud_usd=0.0202,
    spent_usd=0.182,
    gpu_hours=0.97,
    quarantined=4,
    dph_now=0.477,
)


def test_a_panes_billed_figure_stays_whole_at_80_columns():
    head = pane_lines(LONG, False, 78)[0]
    assert "billed $0.0005" in head.plain[:78], head.plain
    wide = pane_lines(LONG, False, 200)[0].plain  # room: nothing given up
    assert "h:41722" in wide and "m:41121" in wide and "$/h storage only" in wide


def test_the_billed_figure_is_on_screen_at_80x24():
    fleet = dataclasses.replace(FLEET, instances=(LONG, *FLEET.instances))

    async def run() -> str:
        app = RentwatchApp(StillEngine(), Ledger(":memory:"), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(80, 24)) as pilot:
            app.post_message(FleetSnapshot(fleet))
            await pilot.pause(0.4)
            view = app.fleet.query_one("FleetView")
            return "".join(s.text for s in (view.render_line(0),))

    line = asyncio.run(run())
    assert "billed $0.0005" in line, line


def _bar(f, width: int) -> list[str]:
    first = campaign_fields(f)
    second = fleet_fields(f, "new", "", budget_cells(width))
    parts = [first + second] if width < WIDE else [first, second]
    return [line.plain for part in parts for line in wrap_fields(part, width)]


def test_the_bar_takes_two_lines_at_120_columns():
    lines = _bar(DEMO, 120)
    assert len(lines) == 2, lines
    assert all(len(line) <= 120 for line in lines)
    text = " ".join(lines)
    for field in ("spent $0.182", "$0.020 lost", "market time ", "×30", "budget ", "sort: new"):
        assert field in text, field
