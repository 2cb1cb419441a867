"""The campaign's jobs (`j`), as `sky queue` lists them: each job's state, host, progress bar,
ETA, dollars so far and attempts; Enter follows the selected job's output live (`sky logs -f`).

Both screens ask the engine (`engine.jobs()`, `engine.job_log(name)`, through its controller) in
thread workers and own their keys. A job's output is the host's text: each line cleaned and drawn
as `Text`, never parsed as markup."""

from __future__ import annotations

from typing import Any

from rentwatch.core.text import clean
from rentwatch.views.jobs import JobRow, cells
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static

from .footer import FittedFooter

REFRESH_S = 2.0  # wall seconds between two reads of the jobs, or of a followed output
WAIT_S = 20.0  # the longest a worker waits for one answer
OUTPUT_LINES = 400  # the followed output's last lines kept on screen

STATE_STYLE = {
    "running": "bold green",
    "finishing": "green",
    "pending": "yellow",
    "done": "grey62",
    "failed": "bold red",
}
COLUMNS = ("job", "state", "host", "progress", "ETA", "$ so far", "tries")


def row_cells(r: JobRow) -> tuple[Text, ...]:
    progress = "grey50" if r.progress is None else "green"
    styles = ("", STATE_STYLE.get(r.state, ""), "", progress, "", "", "")
    return tuple(Text(c, style=st) for c, st in zip(cells(r), styles, strict=True))


def summary(rows: list[JobRow]) -> Text:
    counts = {s: sum(1 for r in rows if r.state == s) for s in STATE_STYLE}
    t = Text(" jobs ", style="bold reverse")
    t.append(f"  {len(rows)} in all   ")
    t.append("   ".join(f"{s} {n}" for s, n in counts.items() if n))
    t.append(f"   ${sum(r.usd for r in rows):.4f} so far", style="bold")
    t.append("   (ETA in market time)", style="dim")
    return t


class JobsTable(DataTable[Text]):
    # the table's own Enter (a hidden "select") hid the screen's Follow from the footer
    BINDINGS = [Binding("enter", "select_cursor", "Follow output", id="jobs.follow")]


class JobsScreen(Screen[None]):
    BINDINGS = [Binding("escape,j", "app.pop_screen", "Back", id="jobs.back")]

    def __init__(self, engine: Any) -> None:
        super().__init__()
        self.engine = engine
        self.rows: list[JobRow] = []
        self.error = ""

    def compose(self) -> ComposeResult:
        yield Static(Text(" jobs  reading…"), id="jobs-head")
        yield JobsTable(id="jobs-table", cursor_type="row")
        yield FittedFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for c in COLUMNS:
            table.add_column(c, key=c)
        table.focus()
        self.load()
        self.set_interval(REFRESH_S, self._tick)

    def _tick(self) -> None:
        if not any(w.is_running for w in self.workers if w.group == "jobs"):
            self.load()

    @work(thread=True, group="jobs", exit_on_error=False)
    def load(self) -> None:
        try:
            rows: list[JobRow] | Exception = list(self.engine.jobs().result(WAIT_S))
        except Exception as exc:  # the engine, the controller or the link: said on screen
            rows = exc
        self.app.call_from_thread(self._show, rows)

    def _show(self, rows: list[JobRow] | Exception) -> None:
        if not self.is_mounted:
            return
        head = self.query_one("#jobs-head", Static)
        if isinstance(rows, Exception):
            self.error = clean(f"{type(rows).__name__}: {rows}", 300)
            head.update(Text(f" jobs  could not read them: {self.error}", style="bold red"))
            return
        self.error = ""
        self.rows = rows
        head.update(summary(rows) if rows else Text(" jobs  this campaign has none"))
        table = self.query_one(DataTable)
        keys = [r.job for r in rows]
        shown = [k.value for k in table.rows]
        if shown != keys:  # rows came or went: drawn again, the cursor kept on its job
            selected = self.selected
            table.clear()
            for r in rows:
                table.add_row(*row_cells(r), key=r.job)
            if selected in keys:
                table.move_cursor(row=keys.index(selected), animate=False)
            return
        for r in rows:
            for col, cell in zip(COLUMNS, row_cells(r), strict=True):
                table.update_cell(r.job, col, cell, update_width=True)

    @property
    def selected(self) -> str | None:
        table = self.query_one(DataTable)
        if not self.rows or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row].job

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_follow()

    def action_follow(self) -> None:
        name = self.selected
        if name is not None:
            self.app.push_screen(JobOutputScreen(self.engine, name))


class JobOutputScreen(Screen[None]):
    """One job's output, read again every REFRESH_S while it is on a host."""

    BINDINGS = [Binding("escape,enter", "app.pop_screen", "Back", id="output.back")]

    def __init__(self, engine: Any, job: str) -> None:
        super().__init__()
        self.engine = engine
        self.job = job
        self.text = ""
        self.source = ""
        self.live = True

    def compose(self) -> ComposeResult:
        yield Static(Text(f" {clean(self.job, 64)}  reading its output…"), id="output-head")
        with VerticalScroll(id="output-body"):
            yield Static("", id="output-text")
        yield FittedFooter()

    def on_mount(self) -> None:
        self.load()
        self.set_interval(REFRESH_S, self._tick)

    def _tick(self) -> None:
        if self.live and not any(w.is_running for w in self.workers if w.group == "output"):
            self.load()

    @work(thread=True, group="output", exit_on_error=False)
    def load(self) -> None:
        try:
            got: Any = self.engine.job_log(self.job).result(WAIT_S)
        except Exception as exc:
            got = exc
        self.app.call_from_thread(self._show, got)

    def _show(self, got: Any) -> None:
        if not self.is_mounted:
            return
        head = self.query_one("#output-head", Static)
        if isinstance(got, Exception):
            said = clean(f"{type(got).__name__}: {got}", 300)
            head.update(
                Text(f" {clean(self.job, 64)}  could not read it: {said}", style="bold red")
            )
            return
        self.text, self.source, self.live = got.text, got.source, got.live
        t = Text(f" {clean(self.job, 64)} ", style="bold reverse")
        t.append(f"  output from {clean(got.source, 200)}")
        t.append("   following" if got.live else "   ended", style="green" if got.live else "dim")
        head.update(t)
        lines = [clean(line, 2000) for line in got.text.splitlines()][-OUTPUT_LINES:]
        body = self.query_one("#output-body", VerticalScroll)
        at_end = body.scroll_y >= body.max_scroll_y - 1
        self.query_one("#output-text", Static).update(
            Text("\n".join(lines)) if lines else Text("(no output yet)", style="grey50")
        )
        if at_end:  # following: the newest line stays in sight, unless scrolled back to read
            body.scroll_end(animate=False)
