"""The receipt, the campaign's spend over time (duds against the rest, from the ledger's billing
spans), and the hosts' delivery record, all from the ledger; the screen scrolls from the
keyboard (its tables outgrow a small terminal)."""

from __future__ import annotations

from rentwatch.core.text import clean
from rentwatch.ledger import Ledger
from rentwatch.ledger.receipt import format_receipt
from rentwatch.ledger.spend_curve import SpendPoint, spend_curve_sql
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
        mine = (self.campaign or chart or "").replace("'", "''")
        as_of = self.ledger.query(
            f"select coalesce((select now from campaign_clocks where campaign = '{mine}'), "
            "(select now from ledger_clock))",
            limit=1,
        ).rows
        hosts = self.ledger.query(
            # p(deliver) with the prior of rentwatch.core.offers.reputation (mean 0.4, weight 2)
            # short names: thirteen columns in 80 cells cut every header to "machi…"
            "select h.machine_id machine, h.host_id host, creates, booted, computed, "
            "finished, throttled, went_offline offline, duds, "
            "round((0.8 + computed) / (2 + computed + duds), 2) p_deliver, "
            "coalesce(failure_classes, '') classes, round(dud_usd, 4) dud_usd, "
            "q.machine_id is not null quarantined from hosts h "
            "left join quarantine q using (machine_id) order by duds desc, creates desc",
            limit=200,
        )
        at = float(as_of[0][0]) if as_of and as_of[0][0] else None
        spend: tuple[str, list[SpendPoint]] | None = None
        if chart is not None:
            width = max(30, min(200, self.size.width - 2))
            got = self.ledger.query(spend_curve_sql(chart, width - 10), limit=1000)
            rows = [SpendPoint.from_row(dict(zip(got.columns, r, strict=True))) for r in got.rows]
            spend = (chart, rows)
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
        h = Table(title="hosts: renter-side delivery record", title_justify="left")
        for c in hosts.columns:
            h.add_column(c)
        for row in hosts.rows:
            h.add_row(*(Text(str(v)) for v in row))
        self.query_one("#hosts", Static).update(h)
