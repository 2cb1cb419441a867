"""The bar's second line: what the fleet costs per hour right now, the budget as a bar, the
market clock (local time, or market time and its speed when simulated), and the fleet's order.
Every figure is the snapshot's, computed by the engine with the billing code of the receipt."""

from __future__ import annotations

from rentwatch.core.text import clean
from rentwatch.views.snapshot import FleetReadout
from rich.text import Text

from .clock import clock, simulated
from .render import spent as spent_text

BUDGET_CELLS = 20


def budget_bar(spent: float, budget: float | None, cells: int = BUDGET_CELLS) -> Text:
    t = Text()
    if not budget or budget >= 1e8:  # watch without a campaign has no real budget
        t.append("budget -", style="grey50")
        return t
    share = max(0.0, spent / budget)
    full = min(cells, int(share * cells + 0.5))
    colour = "red" if share >= 0.9 else "yellow" if share >= 0.7 else "green"
    t.append("budget ")
    t.append("█" * full, style=colour)
    t.append("░" * (cells - full), style="grey35")
    t.append(f" {spent_text(spent)}/${budget:.2f} ({share:.0%})")
    return t


def fleet_fields(
    f: FleetReadout, sort_name: str, filter_text: str = "", cells: int = 20
) -> list[Text]:
    """The bar's second line as fields, each kept whole when the bar wraps."""
    rate = Text(f"${f.dph_now:.3f}/h now", style="bold")
    if f.stopped:
        rate.append(f" ({f.stopped} stopped: storage only)", style="grey62")
    out = [rate, budget_bar(f.spent_usd, f.budget_usd, cells)]
    if simulated(f.time_scale):
        # "market clock ×30, market time ...": a fifth of a 120-column line for one clock
        out.append(Text(f"market time {clock(f.now)} ×{f.time_scale:g}", style="magenta"))
    else:
        out.append(Text(f"{clock(f.now)} local"))
    out.append(Text(f"sort: {sort_name}", style="dim"))  # `o` in the footer sorts
    if filter_text:  # else a filtered fleet reads as the whole of it
        out.append(Text(f"filter: {clean(filter_text, 40)} (/)", style="bold yellow"))
    return out


SEP = "   "
WIDE = 160  # from here the bar's two lines each fit their own; under it they run on as one


def budget_cells(width: int) -> int:
    """The budget bar's cells at `width` columns: it gives way first on a narrower screen (its
    figure and share say the same)."""
    return 20 if width >= WIDE else 5


def wrap_fields(fields: list[Text], width: int, indent: str = " ") -> list[Text]:
    """Fields on as few lines of `width` cells as they fit, never one split across two (a
    field wider than the line is cut with an ellipsis, on a line of its own); under `WIDE`
    columns two spaces apart, not three."""
    sep = SEP if width >= WIDE else "  "
    lines: list[Text] = []
    line = Text(indent)
    for field in fields:
        if line.plain.strip() and line.cell_len + len(sep) + field.cell_len > width:
            lines.append(line)
            line = Text(indent)
        if line.plain.strip():
            line.append(sep)
        line.append_text(field)
    if line.plain.strip():
        lines.append(line)
    for t in lines:
        t.truncate(width, overflow="ellipsis")
    return lines
