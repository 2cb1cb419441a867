"""The bar's second line: what the fleet costs per hour right now, the budget as a bar, the
market clock (local time, or market time and its speed when simulated), and the fleet's order.
Every figure is the snapshot's, computed by the engine with the billing code of the receipt."""

from __future__ import annotations

from rentwatch.core.text import clean
from rentwatch.views.snapshot import FleetReadout
from rich.text import Text

from .clock import clock, simulated, speed

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
    t.append(f" ${spent:.2f}/${budget:.2f} ({share:.0%})")
    return t


def fleet_line(f: FleetReadout, sort_name: str, filter_text: str = "") -> Text:
    t = Text(" ")
    t.append(f"${f.dph_now:.3f}/h now", style="bold")
    stopped = sum(1 for s in f.instances if s.phase == "stopped")
    if stopped:
        t.append(f" ({stopped} stopped: storage only)", style="grey62")
    t.append("   ")
    t.append(budget_bar(f.spent_usd, f.budget_usd))
    if simulated(f.time_scale):
        t.append(f"   {speed(f.time_scale)}, market time {clock(f.now)}", style="magenta")
    else:
        t.append(f"   {clock(f.now)} local")
    t.append(f"   sort: {sort_name} (o)", style="dim")
    if filter_text:  # else a filtered fleet reads as the whole of it
        t.append(f"   filter: {clean(filter_text, 40)} (/)", style="bold yellow")
    return t
