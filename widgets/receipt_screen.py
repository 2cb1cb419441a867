"""The receipt and the hosts' delivery record, from the ledger."""

from __future__ import annotations

from rentwatch.ledger import Ledger
from rentwatch.ledger.receipt import format_receipt
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from .clock import clock


class ReceiptScreen(Screen[None]):
    BINDINGS = [Binding("escape,r", "app.pop_screen", "Back", id="receipt.back")]

    def __init__(self, ledger: Ledger, campaign: str | None = None) -> None:
        super().__init__()
        self.ledger = ledger
        self.campaign = campaign

    def compose(self) -> ComposeResult:
        yield Static("reading the ledger…", id="receipt")
        yield Static("", id="hosts")
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="receipt", exit_on_error=False)
    def load(self) -> None:
        receipts = self.ledger.receipt(self.campaign)
        # the receipt is the ledger's, as of its last event: once the campaign is done, the
        # bar's "spent" goes on with the storage of stopped rentals and the receipt does not
        as_of = self.ledger.query("select now from ledger_clock", limit=1).rows
        hosts = self.ledger.query(
            # p(deliver) with the prior of rentwatch.core.reputation (mean 0.4, weight 2)
            "select h.machine_id, h.host_id, creates, booted, computed, finished, throttled, went_offline, duds, "
            "round((0.8 + computed) / (2 + computed + duds), 2) p_deliver, "
            "coalesce(failure_classes, '') classes, round(dud_usd, 4) dud_usd, "
            "q.machine_id is not null quarantined from hosts h "
            "left join quarantine q using (machine_id) order by duds desc, creates desc",
            limit=200,
        )
        at = float(as_of[0][0]) if as_of and as_of[0][0] else None
        self.app.call_from_thread(self._show, receipts, hosts, at)

    def _show(self, receipts, hosts, at: float | None = None) -> None:  # type: ignore[no-untyped-def]
        t = Table(
            title="receipt" + (f" as of {clock(at)}" if at else ""),
            caption="the ledger's last event" if at else None,
            show_header=False,
        )
        t.add_column("what")
        t.add_column("figure", justify="right")
        for r in receipts:
            for label, value in format_receipt(r):
                t.add_row(Text(label), Text(value))  # a campaign name is text, never markup
        self.query_one("#receipt", Static).update(t if receipts else Text("no creates yet"))
        h = Table(title="hosts: renter-side delivery record")
        for c in hosts.columns:
            h.add_column(c)
        for row in hosts.rows:
            h.add_row(*(Text(str(v)) for v in row))
        self.query_one("#hosts", Static).update(h)
