"""The ledger screen: SQL over the ledger, run in a thread worker through the ledger's query
sandbox (its own read-only cursor, never the controller's write connection: see
`rentwatch.ledger.readonly`); row-limited, cancellable; canned queries one key away. Cells and
error messages are cleaned text, never markup."""

from __future__ import annotations

from typing import Any

from rentwatch.core.errors import RentwatchError
from rentwatch.core.text import clean
from rentwatch.ledger import Ledger
from rentwatch.ledger.export import export_result
from rentwatch.ledger.readonly import QueryResult
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static, TextArea
from textual.worker import get_current_worker

ROW_LIMIT = 500
CANNED = {
    "1": ("receipt", "select * from receipt"),
    "2": (
        "duds by failure class",
        "select failure_class, count(*) n, round(sum(total_usd), 4) usd, "
        "round(avg(lifetime_min), 1) mean_min from instances where dud group by 1 order by n desc",
    ),
    "3": (
        "most expensive duds",
        "select instance_id, machine_id, gpu_name, failure_class, round(lifetime_min, 1) "
        "min, round(total_usd, 4) usd from instances where dud order by total_usd desc limit 20",
    ),
    "4": (
        "one machine's history",
        "select seq, ts, kind, phase, actor, reason from events where machine_id = "
        "(select machine_id from instances order by created_at desc limit 1) order by seq",
    ),
    "5": (
        "throttled hosts",
        "select machine_id, host_id, count(*) n, max(reason) reason from events "
        "where kind = 'throttle' group by 1, 2 order by n desc",
    ),
}


class LedgerScreen(Screen[None]):
    BINDINGS = [
        Binding("ctrl+r,f5", "run", "Run", id="ledger.run"),
        Binding("escape", "cancel_or_close", "Cancel / back", id="ledger.back"),
        Binding("ctrl+e", "export", "Export CSV", id="ledger.export"),
        *[
            Binding(f"ctrl+{k}", f"canned('{k}')", name, id=f"ledger.canned{k}")
            for k, (name, _) in CANNED.items()
        ],
    ]

    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self.ledger = ledger
        self.result: QueryResult | None = None

    def compose(self) -> ComposeResult:
        try:
            editor = TextArea(CANNED["1"][1], language="sql", id="sql")
        except Exception:  # no tree-sitter grammar: plain text still works
            editor = TextArea(CANNED["1"][1], id="sql")
        yield editor
        yield Static(
            "ctrl+r runs · ctrl+1..5 canned queries · ctrl+e exports · esc back", id="query-status"
        )
        yield DataTable(id="results")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#sql", TextArea).focus()
        self.action_run()

    def action_canned(self, key: str) -> None:
        self.query_one("#sql", TextArea).text = CANNED[key][1]
        self.action_run()

    def action_run(self) -> None:
        self._status("running…")
        self.run_query(self.query_one("#sql", TextArea).text)

    @work(thread=True, exclusive=True, group="ledger-query", exit_on_error=False)
    def run_query(self, sql: str) -> None:
        worker = get_current_worker()
        try:
            result: QueryResult | RentwatchError = self.ledger.query(sql, limit=ROW_LIMIT)
        except RentwatchError as exc:
            result = exc
        if not worker.is_cancelled:
            self.app.call_from_thread(self._show, result)

    def _show(self, result: QueryResult | RentwatchError) -> None:
        table = self.query_one("#results", DataTable)
        if isinstance(result, RentwatchError):
            self._status(f"{result.title}: {clean(result, 500)}", error=True)
            return
        self.result = result
        table.clear(columns=True)
        table.add_columns(*(Text(clean(c, 60)) for c in result.columns))
        for row in result.rows:
            table.add_row(*(Text("" if v is None else clean(_fmt(v), 2000)) for v in row))
        note = f"{len(result.rows)} row(s)" + (
            f", more than {ROW_LIMIT}: showing the first" if result.truncated else ""
        )
        self._status(note)

    def _status(self, text: str, error: bool = False) -> None:
        self.query_one("#query-status", Static).update(
            Text(text, style="bold red" if error else "dim")
        )

    def action_cancel_or_close(self) -> None:
        running = [w for w in self.workers if w.group == "ledger-query" and w.is_running]
        if running:
            self.ledger.interrupt()
            for w in running:
                w.cancel()
            self._status("query cancelled")
        else:
            self.app.pop_screen()

    def action_export(self) -> None:
        if self.result is None:
            return
        path = "rentwatch-query.csv"
        export_result(self.result, path)
        self.notify(f"wrote {len(self.result.rows)} rows to {path}")


def _fmt(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, float) else str(v)
