"""Times as a person reads them. On the real market, market time is the wall clock and is shown
in the operator's local time zone; on the simulator it runs faster than the wall, so a time is
labelled as market time and the clock's speed is said where the fleet is (`speed`)."""

from __future__ import annotations

from datetime import datetime


def clock(ts: float | None, with_date: bool = False) -> str:
    """`ts` (epoch seconds) in the local time zone: `14:03:22`, or `2026-11-30 14:03:22`."""
    if ts is None or ts != ts:  # None or NaN
        return "-"
    try:
        moment = datetime.fromtimestamp(ts).astimezone()
    except (OverflowError, OSError, ValueError):
        return "-"
    return moment.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")


def ago(seconds: float) -> str:
    """A span of market time, short: `45s`, `3m20s`, `2h05m`."""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def time_label(time_scale: float) -> str:
    """What the times on screen are: local (real market) or the simulated market's clock."""
    return "market time" if simulated(time_scale) else "local time"


def simulated(time_scale: float) -> bool:
    return abs(time_scale - 1.0) > 1e-9


def speed(time_scale: float) -> str:
    """The simulated market clock's speed, e.g. `market clock ×30`; empty on a real market."""
    if not simulated(time_scale):
        return ""
    return f"market clock ×{time_scale:g}"
