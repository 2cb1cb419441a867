"""The ledger screen: SQL over the ledger, run in a thread worker through the ledger's query
sandbox (its own read-only cursor, never the controller's write connection: see
`rentwatch.ledger.readonly`); row-limited and paged (ctrl+n / ctrl+b), cancellable; canned
queries one key away (F2..F6, and in the command palette); exports go to the file the operator types, written by rentwatch's own
code. Cells and error messages are cleaned text, never markup."""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal
from typing import Any

from rentwatch.core.errors import RentwatchError
from rentwatch.core.text import clean
from rentwatch.ledger import Ledger
from rentwatch.ledger.canned import CANNED
from rentwatch.ledger.export import export_result
from rentwatch.ledger.readonly import QueryResult
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static, TextArea
from textual.worker import get_current_worker

from .footer import FittedFooter

ROW_LIMIT = 500


def canned_key(key: str) -> str:
    """Canned query 1 is F2 (F1 is help in many terminals), ..., 5 is F6."""
    return f"f{int(key) + 1}"


SHORT = {"1": "receipt", "2": "duds", "3": "dud cost", "4": "a machine", "5": "throttled"}


def canned_legend() -> str:
    """The canned queries' keys on one line that fits 80 columns."""
    return "  ".join(f"F{int(k) + 1} {SHORT[k]}" for k in CANNED) + "  · or ctrl+p"


class LedgerScreen(Screen[None]):
    BINDINGS = [
        Binding("ctrl+r", "run", "Run", id="ledger.run"),  # F2..F6 are the canned queries
        Binding("escape", "cancel_or_close", "Cancel / back", id="ledger.back"),
        # priority: the SQL editor would take these keys (end of line, ...) otherwise
        Binding("ctrl+e", "export", "Export CSV", id="ledger.export", priority=True),
        # the editor's ctrl+a goes to the line's start: a query typed then went in front of
        # the canned one instead of over it
        Binding(
            "ctrl+a", "select_all", "Select all", id="ledger.select_all", show=False, priority=True
        ),
        Binding("ctrl+n", "page(1)", "Next page", id="ledger.next", show=False, priority=True),
        Binding(
            "ctrl+b", "page(-1)", "Previous page", id="ledger.previous", show=False, priority=True
        ),
        # function keys, not ctrl+digit: terminals and tmux send no distinct ctrl+digit, and
        # the SQL editor has the focus, so plain digits are text. All are in the palette too.
        # not in the footer: there the editor's own f6 came first and the rest were cut at
        # "f4 most" (120 columns); the line under the status names all five instead
        *[
            Binding(
                canned_key(k),
                f"canned('{k}')",
                name,
                tooltip=f"Ledger query: {name}",
                id=f"ledger.canned{k}",
                priority=True,
                show=False,
            )
            for k, (name, _) in CANNED.items()
        ],
    ]

    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self.ledger = ledger
        self.result: QueryResult | None = None
        self.no_result = "no query has answered yet"  # why `result` is None, for the export
        self.sql = ""
        self.page_offset = 0

    def compose(self) -> ComposeResult:
        try:
            editor = TextArea(CANNED["1"][1], language="sql", id="sql")
        except Exception:  # no tree-sitter grammar: plain text still works
            editor = TextArea(CANNED["1"][1], id="sql")
        yield editor
        yield Static(
            "ctrl+r runs · F2..F6 canned queries (or ctrl+p) · ctrl+e exports · esc back",
            id="query-status",
        )
        yield Static(Text(canned_legend(), style="dim"), id="canned-keys")
        yield DataTable(id="results")
        export = Input(placeholder="export to FILE.csv or FILE.parquet", id="export-path")
        export.display = False
        yield export
        yield FittedFooter()

    def on_mount(self) -> None:
        self.query_one("#sql", TextArea).focus()
        self.action_run()

    def action_select_all(self) -> None:
        export = self.query_one("#export-path", Input)
        if export.has_focus:  # the path box keeps its own ctrl+a (to the start)
            export.action_home()
            return
        editor = self.query_one("#sql", TextArea)
        editor.focus()
        editor.select_all()

    def action_canned(self, key: str) -> None:
        self.query_one("#sql", TextArea).text = CANNED[key][1]
        self.action_run()

    def action_run(self) -> None:
        self.sql = self.query_one("#sql", TextArea).text
        self.page_offset = 0
        self._status("running…")
        self.run_query(self.sql, 0)

    def action_page(self, step: int) -> None:
        if self.result is None or not self.sql:
            return
        if (step > 0 and not self.result.truncated) or (step < 0 and self.page_offset == 0):
            return
        self.page_offset = max(0, self.page_offset + step * ROW_LIMIT)
        self._status("running…")
        self.run_query(self.sql, self.page_offset)

    @work(thread=True, exclusive=True, group="ledger-query", exit_on_error=False)
    def run_query(self, sql: str, offset: int = 0) -> None:
        worker = get_current_worker()
        try:
            result: QueryResult | RentwatchError = self.ledger.query(
                sql, limit=ROW_LIMIT, offset=offset
            )
        except RentwatchError as exc:
            result = exc
        except Exception as exc:  # a bug must show on screen, not leave `running…` forever
            result = RentwatchError(f"{type(exc).__name__}: {exc}")
        if not worker.is_cancelled:
            self.app.call_from_thread(self._show, result)

    def _show(self, result: QueryResult | RentwatchError) -> None:
        table = self.query_one("#results", DataTable)
        if isinstance(result, RentwatchError):
            self.result = None  # the last answer must not read as this query's
            self.no_result = f"the query failed ({clean(result.title, 80)}): fix it, then ctrl+r"
            table.clear(columns=True)
            self._status(f"{result.title}: {clean(result, 500)}", error=True)
            return
        self.result = result
        table.clear(columns=True)
        heads = [Text(clean(c, 60)) for c in result.columns]
        timed = [is_time_column(c) for c in result.columns]
        rows = [
            [
                Text("" if v is None else clean(_fmt(v, t), 2000))
                for v, t in zip(row, timed, strict=False)
            ]
            for row in result.rows
        ]
        # widths given, not left to the table's own measuring on its next idle: a paint
        # before that pass cached every cell cut to its header's width
        for i, head in enumerate(heads):
            width = max((r[i].cell_len for r in rows if i < len(r)), default=0)
            table.add_column(head, width=max(head.cell_len, width))
        for cells in rows:
            table.add_row(*cells)
        first = result.offset + 1
        note = f"{len(result.rows)} row(s)"
        if result.truncated or result.offset:
            note = f"rows {first}-{result.offset + len(result.rows)}" + (
                " of more: ctrl+n next page" if result.truncated else ""
            )
            if result.offset:
                note += ", ctrl+b previous"
        self._status(note)
        self.call_after_refresh(self._say_wide, note)

    def _say_wide(self, note: str) -> None:
        """Where the answer is wider than the screen, how many of its columns are in sight and
        how to see the rest (at 120 columns the receipt view's last nine were off the edge)."""
        table = self.query_one("#results", DataTable)
        room = table.scrollable_content_region.width
        widths = [c.get_render_width(table) for c in table.ordered_columns]
        if not widths or sum(widths) <= room:
            return
        seen = next((i for i in range(len(widths)) if sum(widths[: i + 1]) > room), len(widths))
        self._status(
            f"{note}; {seen} of {len(widths)} columns in sight: tab to the results, ←/→ scroll"
        )

    def _status(self, text: str, error: bool = False) -> None:
        self.query_one("#query-status", Static).update(
            Text(text, style="bold red" if error else "dim")
        )

    def action_cancel_or_close(self) -> None:
        export = self.query_one("#export-path", Input)
        if export.display:
            export.display = False
            self.query_one("#sql", TextArea).focus()
            return
        running = [w for w in self.workers if w.group == "ledger-query" and w.is_running]
        if running:
            self.ledger.interrupt()
            for w in running:
                w.cancel()
            self._status("query cancelled")
        else:
            self.app.pop_screen()

    def action_export(self) -> None:
        """Ask where to write (nothing is written until the operator names a file)."""
        if self.result is None:
            self._status(f"nothing to export: {self.no_result}", error=True)
            return
        export = self.query_one("#export-path", Input)
        export.display = True
        if not export.value:
            export.value = "rentwatch-query.csv"
        export.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "export-path" or self.result is None:
            return
        path = event.value.strip()
        event.input.display = False
        self.query_one("#sql", TextArea).focus()
        if not path:
            return
        try:
            export_result(self.result, path)
        except RentwatchError as exc:
            self._status(f"{exc.title}: {clean(exc, 300)}", error=True)
            return
        n = len(self.result.rows)
        self._status(f"wrote {n} row{'' if n == 1 else 's'} to {clean(path, 200)}")


TIME_COLUMNS = frozenset({"ts", "wall", "now", "began", "ended", "last_seen"})
EPOCH_RANGE = (1e9, 4e9)  # 2001 to 2096: a number there in a time column is a moment


def is_time_column(name: str) -> bool:
    """A column that holds a moment as epoch seconds: the events' `ts` and `wall`, the
    views' `*_at` (the ledger keeps time as seconds; SQL and exports see them so)."""
    return name in TIME_COLUMNS or name.endswith(("_at", "_ts"))


def _fmt(v: Any, time_column: bool = False) -> str:
    if isinstance(v, datetime):  # the views' *_time columns: local time, to the second
        return v.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    if (
        time_column
        and isinstance(v, int | float | Decimal)
        and not isinstance(v, bool)
        and EPOCH_RANGE[0] <= v <= EPOCH_RANGE[1]
    ):  # epoch seconds, shown as the local time they are (the raw figure is in SQL and exports)
        return datetime.fromtimestamp(float(v)).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, float):  # four decimals at most: round(x, 1) reads 21.2, not 21.2000
        return f"{v:.4f}".rstrip("0").rstrip(".") if math.isfinite(v) else str(v)
    return str(v)
