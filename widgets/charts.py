"""Charts drawn in text cells (eighth blocks), so they sit in a Static, scale with the screen and
come out in SVG screenshots: a column chart of one series (a GPU's utilization over time) and a
stacked one of two (the campaign's spend: duds below, the rest above)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

EIGHTHS = " ▁▂▃▄▅▆▇█"


def resample(values: Sequence[float], width: int) -> list[float]:
    """`values` as `width` columns: the last value of each bucket when there are more values
    than columns (a cumulative figure stays exact at the end), each value once when fewer."""
    if width <= 0 or not values:
        return []
    if len(values) <= width:
        return list(values)
    return [values[min(len(values) - 1, (k + 1) * len(values) // width - 1)] for k in range(width)]


def _cell(eighths: int, row: int) -> str:
    """The glyph for the cell `row` (0 at the bottom) of a column `eighths` high."""
    return EIGHTHS[max(0, min(8, eighths - row * 8))]


def column_chart(
    values: Sequence[float],
    width: int,
    height: int = 4,
    top: float = 100.0,
    unit: str = "%",
    style: str = "cyan",
) -> list[Text]:
    """`height` lines: a y axis labelled 0 and `top`, one column per value (resampled to fit
    `width` cells after the axis)."""
    label_w = len(f"{top:.0f}{unit}")
    room = max(1, width - label_w - 1)
    cols = resample(values, room)
    wide = max(1, min(4, room // max(1, len(cols))))  # few samples: each a wider column
    cols = [v for v in cols for _ in range(wide)]
    levels = [round(max(0.0, min(top, v)) / top * height * 8) if top else 0 for v in cols]
    lines = []
    for row in range(height - 1, -1, -1):
        label = f"{top:.0f}{unit}" if row == height - 1 else f"0{unit}" if row == 0 else ""
        t = Text(f"{label:>{label_w}}▕", style="dim")
        if row:
            t.append("".join(_cell(h, row) for h in levels), style=style)
        else:  # a zero is a dot on the axis: blank, the series would seem to end before it
            for h in levels:
                t.append(_cell(h, 0), style=style) if h else t.append("·", style="dim")
        lines.append(t)
    return lines


def stacked_chart(
    lower: Sequence[float],
    upper: Sequence[float],
    width: int,
    height: int = 6,
    styles: tuple[str, str] = ("red", "green"),
) -> list[Text]:
    """Two series stacked per column (`lower` drawn first), against a y axis in USD from 0 to
    the highest total; a cell the two share is drawn in the lower one's style."""
    totals = [a + b for a, b in zip(lower, upper, strict=True)]
    top = max(totals, default=0.0)
    label = f"${top:.2f}"
    label_w = len(label)
    w = max(1, width - label_w - 1)
    low, tot = resample(lower, w), resample(totals, w)
    scale = height * 8 / top if top > 0 else 0.0
    lows = [round(v * scale) for v in low]
    tops = [round(v * scale) for v in tot]
    lines = []
    for row in range(height - 1, -1, -1):
        axis = label if row == height - 1 else "$0" if row == 0 else ""
        t = Text(f"{axis:>{label_w}}▕", style="dim")
        for lo, hi in zip(lows, tops, strict=True):
            # the lower series owns every cell it reaches into; the rest is the upper one's
            t.append(_cell(hi, row), style=styles[0] if lo > row * 8 else styles[1])
        lines.append(t)
    return lines
