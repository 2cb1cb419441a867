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

from .ledgers import new_ledger
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
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
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


HOSTS = ["machine", "host", "creates", "booted", "computed", "finished", "throttled"]
HOSTS += ["offline", "duds", "p_deliver", "classes", "dud_usd", "quarantined"]
HOST_ROWS = [
    [41121, 41722, 2, 1, 0, 0, 0, 0, 1, 0.27, "cancelled,ssh_dead", 0.0012, True],
    [6076, 75078, 1, 0, 0, 0, 0, 0, 1, 0.27, "freeze", 0.0004, True],
    [31832, 63942, 1, 1, 1, 0, 0, 0, 0, 0.6, "", 0.0, False],
]


def test_the_receipts_hosts_table_fits_118_columns_and_says_how_to_see_it_narrower():
    from types import SimpleNamespace

    from rentwatch.widgets.receipt_screen import HOSTS_TITLE, hosts_table
    from rich.console import Console

    hosts = SimpleNamespace(columns=HOSTS, rows=HOST_ROWS)
    table = hosts_table(hosts, 118)  # 120 less the scrollbar
    assert Console(width=10_000).measure(table).maximum <= 118
    assert table.title == HOSTS_TITLE
    out = Console(width=118, record=True)
    out.print(table)
    text = out.export_text()
    assert "quarantined" in text and "cancelled,ssh_dead" in text  # nothing cut
    assert "←/→ scroll" in str(hosts_table(hosts, 78).title)  # 80 columns: it scrolls


def test_the_ledger_screen_says_when_its_answer_is_wider_than_the_screen(tmp_path):
    from rentwatch.widgets.ledger_screen import LedgerScreen
    from textual.widgets import Static, TextArea

    from .test_ledger_screen import _Host, _until

    led = Ledger(tmp_path / "l.duckdb")
    led.record("note", at=1, actor="engine", reason="x")
    app = _Host(led)
    wide = ", ".join(f"'{'v' * 12}' as column_{i:02d}" for i in range(12))

    async def run() -> tuple[str, str]:
        async with app.run_test(size=(120, 40)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, LedgerScreen))
            screen = app.screen
            status = screen.query_one("#query-status", Static)
            screen.query_one("#sql", TextArea).text = f"select {wide}"
            await pilot.press("ctrl+r")
            await _until(pilot, lambda: "in sight" in str(status.render()))
            said = str(status.render())
            screen.query_one("#sql", TextArea).text = "select 1 as a, 2 as b"
            await pilot.press("ctrl+r")
            await _until(pilot, lambda: "1 row(s)" in str(status.render()))
            await pilot.pause(0.2)
            return said, str(status.render())

    wide_said, narrow_said = asyncio.run(run())
    assert "1 row(s); " in wide_said and " of 12 columns in sight" in wide_said
    assert "←/→ scroll" in wide_said
    assert "in sight" not in narrow_said  # all of it shows: nothing to say
