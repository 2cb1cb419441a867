"""The bar's second line: what the fleet costs per hour right now, the budget as a bar, the
market clock (local time, or market time and its speed when simulated), and the fleet's order.
Every figure is the snapshot's, computed by the engine with the billing code of the receipt."""

from __future__ import annotations

from rentwatch.core.text import clean
from rentwatch.views.snapshot import FleetReadout
from rich.text import Text

from .clock import clock, simulated, speed
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
        out.append(Text(f"{speed(f.time_scale)}, market time {clock(f.now)}", style="magenta"))
    else:
        out.append(Text(f"{clock(f.now)} local"))
    out.append(Text(f"sort: {sort_name} (o)", style="dim"))
    if filter_text:  # else a filtered fleet reads as the whole of it
        out.append(Text(f"filter: {clean(filter_text, 40)} (/)", style="bold yellow"))
    return out


SEP = "   "


def wrap_fields(fields: list[Text], width: int, indent: str = " ") -> list[Text]:
    """Fields on as few lines of `width` cells as they fit, never one split across two (a
    field wider than the line is cut with an ellipsis, on a line of its own); under 100
    columns two spaces apart, not three."""
    sep = SEP if width >= 100 else "  "
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
