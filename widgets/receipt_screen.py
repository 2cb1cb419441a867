"""The receipt, the campaign's spend over time (duds against the rest, from the ledger's billing
spans), and the hosts' delivery record, all from the ledger; the screen scrolls from the
keyboard (its tables outgrow a small terminal)."""

from __future__ import annotations

from typing import Any

from rentwatch.core.text import clean
from rentwatch.ledger import Ledger
from rentwatch.ledger.receipt import format_receipt
from rentwatch.ledger.screen_reads import SpendPoint, clock_of, hosts_record, spend_points
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from .charts import stacked_chart
from .clock import clock
from .footer import FittedFooter

CHART_HEIGHT = 6


def render_spend(campaign: str, points: list[SpendPoint], width: int) -> Text:
    """The campaign's spend so far as a stacked chart: duds (red) under the rest (green)."""
    t = Text()
    t.append(f"spend over time: {clean(campaign, 60)}", style="bold")
    t.append("   ")
    t.append("█ duds", style="red")
    t.append("  ")
    t.append("█ the rest (verified rentals, delivered work)", style="green")
    if not points:
        t.append("\n   nothing billed yet", style="grey50")
        return t
    last = points[-1]
    t.append(
        f"\n   by {clock(last.at)}: duds ${last.dud_usd:.4f}, the rest ${last.other_usd:.4f}\n"
    )
    lines = stacked_chart(
        [p.dud_usd for p in points], [p.other_usd for p in points], width, CHART_HEIGHT
    )
    for line in lines:
        t.append(line)
        t.append("\n")
    first = clock(points[0].at)
    pad = max(1, width - len(first) - len(clock(last.at)) - 6)
    t.append(f"      {first}{' ' * pad}{clock(last.at)}", style="dim")
    return t


HOSTS_TITLE = "hosts: renter-side delivery record"
CLASSES_WIDTH = 24  # the failure classes wrap in their cell past this


def hosts_table(hosts: Any, width: int) -> Table:
    """The hosts' record as a table without vertical rules, a blank between columns, its
    failure classes wrapped: at 120 columns its thirteen columns were cut at `classes`. Where it is still wider than the
    screen (80 columns) its title says how to see the rest."""
    h = Table(
        title=HOSTS_TITLE,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 0),  # one blank between columns, as `ps` prints them
    )
    for c in hosts.columns:
        wrap = c == "classes"
        h.add_column(c, max_width=CLASSES_WIDTH if wrap else None, overflow="fold")
    for row in hosts.rows:
        h.add_row(*(Text(str(v)) for v in row))
    wide = Console(width=10_000).measure(h).maximum
    if width and wide > width:
        h.title = f"{HOSTS_TITLE} ({wide} columns wide: ←/→ scroll)"
    return h


class ReceiptScreen(Screen[None]):
    BINDINGS = [Binding("escape,r", "app.pop_screen", "Back", id="receipt.back")]

    def __init__(
        self, ledger: Ledger, campaign: str | None = None, chart: str | None = None
    ) -> None:
        super().__init__()
        self.ledger = ledger
        self.campaign = campaign
        self.chart = chart or campaign  # whose spend the chart draws (the dashboard's)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="receipt-body"):
            yield Static("reading the ledger…", id="receipt")
            yield Static("", id="spend")
            yield Static("", id="hosts")
        yield FittedFooter()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, group="receipt", exit_on_error=False)
    def load(self) -> None:
        receipts = self.ledger.receipt(self.campaign)
        # the receipt is the ledger's, to its clock (the engine's last poll, `Ledger.tick`):
        # once the controller has exited, stopped rentals' storage bills on past that clock
        # (the charted campaign's clock, where the chart ends: one ledger may hold several
        # markets' clocks, as the demo's, whose second demo's market runs hours behind the first)
        chart = self.chart or (str(receipts[-1]["campaign"]) if receipts else None)
        # the dashboard's campaign first: the others in the ledger (earlier demos, campaigns
        # run before) follow, each in its own section, and read as another's figures
        receipts.sort(key=lambda r: r["campaign"] != chart)
        at = clock_of(self.ledger, self.campaign or chart or "")
        hosts = hosts_record(self.ledger)
        spend: tuple[str, list[SpendPoint]] | None = None
        if chart is not None:
            width = max(30, min(200, self.size.width - 2))
            spend = (chart, spend_points(self.ledger, chart, width - 10))
        self.app.call_from_thread(self._show, receipts, hosts, at, spend)

    def _show(self, receipts, hosts, at: float | None = None, spend=None) -> None:  # type: ignore[no-untyped-def]
        t = Table(
            title="receipt" + (f" as of {clock(at)}" if at else ""),
            caption="the controller's last look at the market" if at else None,
            show_header=False,
        )
        t.add_column("what")
        t.add_column("figure", justify="right")
        for i, r in enumerate(receipts):
            if i == 1:
                t.add_section()
                t.add_row(Text("other campaigns in this ledger", style="bold"), Text(""))
            elif i:
                t.add_section()
            for label, value in format_receipt(r):
                t.add_row(Text(label), Text(value))  # a campaign name is text, never markup
        self.query_one("#receipt", Static).update(t if receipts else Text("no creates yet"))
        if spend is not None:
            width = max(30, min(200, self.size.width - 2))
            self.query_one("#spend", Static).update(render_spend(spend[0], spend[1], width))
        room = self.query_one("#receipt-body").scrollable_content_region.width
        self.query_one("#hosts", Static).update(hosts_table(hosts, room or self.size.width))
