"""The ledger screen on its own (no market): its queries run in the sandbox, page through long
answers, show hostile text cleaned, and export only to the file the operator types."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

from rentwatch import widgets
from rentwatch.ledger import Ledger
from rentwatch.widgets.ledger_screen import ROW_LIMIT, LedgerScreen
from textual.app import App
from textual.widgets import DataTable, Input, Static, TextArea


class _Host(App[None]):
    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self.ledger = ledger

    def on_mount(self) -> None:
        self.push_screen(LedgerScreen(self.ledger))


class _Styled(_Host):
    """The host with the dashboard's own style: the results table fills the screen, so a new
    answer does not resize it."""

    CSS_PATH = str(Path(widgets.__file__).with_name("app.tcss"))


async def _until(pilot, cond, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, "timed out"
        await pilot.pause(0.05)


def test_ledger_screen_pages_cleans_and_exports_where_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    led = Ledger(tmp_path / "l.duckdb")
    for i in range(ROW_LIMIT + 20):
        led.record("note", at=i, actor="engine", reason=f"n{i}\x1b]52;c;AAAA\x07\u202e")
    app = _Host(led)

    async def run() -> None:
        async with app.run_test(size=(140, 40)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, LedgerScreen))
            screen = app.screen
            assert isinstance(screen, LedgerScreen)
            status = screen.query_one("#query-status", Static)
            screen.query_one("#sql", TextArea).text = "select seq, reason from events order by seq"
            await pilot.press("ctrl+r")
            await _until(pilot, lambda: screen.result is not None and screen.result.truncated)
            table = screen.query_one("#results", DataTable)
            assert table.row_count == ROW_LIMIT
            cells = [str(table.get_cell_at((r, 1))) for r in range(table.row_count)]
            assert not [c for c in cells if "\x1b" in c or "\u202e" in c]
            await pilot.press("ctrl+n")
            await _until(pilot, lambda: screen.result is not None and screen.result.offset)
            assert table.row_count == 20 and "ctrl+b" in str(status.render())
            # nothing is written until a file is named; then exactly there
            before = sorted(p.name for p in tmp_path.iterdir())
            await pilot.press("ctrl+e")
            await pilot.pause(0.1)
            assert sorted(p.name for p in tmp_path.iterdir()) == before
            box = screen.query_one("#export-path", Input)
            assert box.display
            box.value = str(tmp_path / "mine.csv")
            await pilot.press("enter")
            await _until(pilot, lambda: (tmp_path / "mine.csv").exists())
            text = (tmp_path / "mine.csv").read_text()
            assert "\x1b" not in text and text.count("\n") == 21
            # a place that cannot be written is a message, not a crash
            await pilot.press("ctrl+e")
            box.value = str(tmp_path / "no" / "such" / "dir.csv")
            await pilot.press("enter")
            await _until(pilot, lambda: "cannot write" in str(status.render()))
            assert app.is_running
            # numbers read as they are; a bad query leaves no earlier answer on screen
            screen.query_one("#sql", TextArea).text = "select round(21.2::double, 1) as x, 1/3 as y"
            await pilot.press("ctrl+r")
            await _until(pilot, lambda: table.row_count == 1)
            assert [str(table.get_cell_at((0, c))) for c in (0, 1)] == ["21.2", "0.3333"]
            # a moment in epoch seconds reads as the local time it is, in a time column only
            screen.query_one(
                "#sql", TextArea
            ).text = (
                "select 1796556967.405 as ts, 1796556967.405 as verified_at, 1796556967.405 as x"
            )
            await pilot.press("ctrl+r")
            await _until(pilot, lambda: table.row_count == 1 and screen.result.columns[0] == "ts")
            local = datetime.fromtimestamp(1796556967.405).astimezone()
            shown = [str(table.get_cell_at((0, c))) for c in (0, 1, 2)]
            assert shown == [local.strftime("%Y-%m-%d %H:%M:%S")] * 2 + ["1796556967.405"]
            screen.query_one("#sql", TextArea).text = "select nonsense from nowhere"
            await pilot.press("ctrl+r")
            await _until(pilot, lambda: screen.result is None)
            assert table.row_count == 0 and "nowhere" in str(status.render())
            # nothing to export then, and the screen says so and why, not nothing at all
            await pilot.press("ctrl+e")
            await _until(pilot, lambda: "nothing to export" in str(status.render()))
            assert "the query failed" in str(status.render())
            assert not screen.query_one("#export-path", Input).display

    asyncio.run(run())
    led.close()


def _receipt_shown(led: Ledger, chart: str | None = None) -> tuple[bool, object]:
    """The receipt screen on `led`, once it has read the ledger: whether the app still runs
    (nothing in the ledger's text broke it), and what the receipt panel shows."""
    from rentwatch.widgets.receipt_screen import ReceiptScreen

    class _Receipt(App[None]):
        def on_mount(self) -> None:
            self.push_screen(ReceiptScreen(led, chart=chart))

    app = _Receipt()

    async def run() -> tuple[bool, object]:
        async with app.run_test(size=(120, 40)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, ReceiptScreen))
            shown = app.screen.query_one("#receipt", Static)
            await _until(pilot, lambda: "reading" not in str(shown.render()))
            await pilot.pause(0.2)
            return app.is_running and app.return_code is None, shown.content

    return asyncio.run(run())


def test_receipt_screen_shows_a_markup_like_campaign_name_as_text(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    name = "camp[/]x[bold]\x1b]0;t\x07"
    s = led.intent("create", at=0, actor="rule:replace", reason="r", campaign=name, gpu_dph=0.2)
    led.outcome(s, at=0, ok=True, instance_id=1)
    running, _ = _receipt_shown(led)
    assert running
    led.close()


def test_receipt_screen_says_as_of_when(tmp_path):
    """Once a campaign is done, stopped rentals go on billing storage on the bar, not in the
    ledger: the receipt says the moment it is as of."""
    from rentwatch.widgets.clock import clock

    led = Ledger(tmp_path / "l.duckdb")
    at = 1_796_064_903.0
    s = led.intent("create", at=at, actor="rule:replace", reason="r", campaign="c", gpu_dph=0.2)
    led.outcome(s, at=at + 60, ok=True, instance_id=1)
    _, table = _receipt_shown(led)
    shown = f"{getattr(table, 'title', '')} / {getattr(table, 'caption', '')}"
    assert shown == f"receipt as of {clock(at + 60)} / the controller's last look at the market"
    led.close()


def test_receipt_screen_is_as_of_the_charted_campaigns_clock(tmp_path):
    """A ledger of two demos: the second's simulated market runs hours behind the first's.
    The receipt says the moment the chart (the newest campaign's) ends at, not the first's."""
    from rentwatch.widgets.clock import clock

    led = Ledger(tmp_path / "l.duckdb")
    at = 1_796_064_903.0
    for name, port, end in (("demo", 9001, at + 7200), ("demo-2", 9002, at + 600)):
        led.record(
            "campaign_start",
            at=at,
            actor="engine",
            reason="s",
            campaign=name,
            detail={"market": f"http://127.0.0.1:{port}"},
        )
        s = led.intent(
            "create", at=at, actor="rule:replace", reason="r", campaign=name, gpu_dph=0.2
        )
        led.outcome(s, at=end, ok=True, instance_id=port)
    _, table = _receipt_shown(led)
    assert getattr(table, "title", "") == f"receipt as of {clock(at + 600)}"
    led.close()


def test_receipt_screen_puts_the_dashboards_campaign_first(tmp_path):
    # a newcomer's second demo: the ledger's first campaign filled the screen's top, and its
    # 50% duds read as the dashboard's figure (its header said 0%)
    from rich.table import Table

    led = Ledger(tmp_path / "l.duckdb")
    for i, name in enumerate(("demo", "demo-2")):
        s = led.intent("create", at=i, actor="rule:replace", reason="r", campaign=name, gpu_dph=0.2)
        led.outcome(s, at=i, ok=True, instance_id=i + 1)
    _, table = _receipt_shown(led, chart="demo-2")
    assert isinstance(table, Table)
    cells = [str(c) for c in table.columns[1]._cells]
    labels = [str(c) for c in table.columns[0]._cells]
    assert cells[0] == "demo-2" and "demo" in cells[1:]
    assert "other campaigns in this ledger" in labels
    led.close()


def test_ledger_answer_is_drawn_at_its_cells_width_even_when_painted_before_measured(tmp_path):
    """The table may be painted between the answer's arrival and its own measuring pass: the
    cells drawn then must not stay cut to their headers' width."""
    led = Ledger(tmp_path / "l.duckdb")
    wide = "a reason far wider than its header"
    led.record("note", at=1, actor="engine", reason=wide)
    app = _Styled(led)

    async def run() -> None:
        async with app.run_test(size=(140, 40)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, LedgerScreen))
            screen = app.screen
            assert isinstance(screen, LedgerScreen)
            await _until(pilot, lambda: screen.result is not None)
            table = screen.query_one("#results", DataTable)
            screen._show(led.query("select reason r from events where kind = 'note'"))
            for y in range(table.size.height):  # a paint before the table's idle pass
                table.render_line(y)
            await pilot.pause(0.1)
            drawn = "".join(s.text for s in table.render_line(1))
            assert wide in drawn

    asyncio.run(run())
