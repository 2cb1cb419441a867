"""A GPU's vital signs as the NVML sampler reports them, read as a host's evidence: each figure
finite and in a real card's range, or absent with the reason it was dropped (absent is not 0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .verdict import finite

# field -> (lowest, highest) a real card reports; outside it the host's figure is not believed.
# 2 TiB of memory, 150 C (cards shut down near 100), 3 kW (a GB200 board is ~1.2 kW), and
# fans up to 100% (NVML's "intended speed", a share of the top speed)
RANGES: dict[str, tuple[float, float]] = {
    "mem_used_mb": (0, 2 * 2**20),
    "mem_total_mb": (1, 2 * 2**20),
    "temp": (0, 150),
    "power_w": (0, 3000),
    "power_limit_w": (1, 3000),
    "fan_pct": (0, 100),
    "ecc_corrected": (0, 2**48),
    "ecc_uncorrected": (0, 2**48),
    "retired_pages": (0, 2**20),
}
HOT_C = 85.0  # at or over this a consumer card throttles for heat (the pane marks it)


@dataclass(frozen=True)
class Vitals:
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    temp: float | None = None  # degrees C
    power_w: float | None = None
    power_limit_w: float | None = None
    fan_pct: float | None = None
    ecc_corrected: float | None = None  # volatile: since the driver loaded
    ecc_uncorrected: float | None = None
    retired_pages: float | None = None


def read_vitals(sample: dict[str, Any]) -> tuple[Vitals, tuple[str, ...]]:
    """The vital signs of one sample, and why each figure present but dropped was dropped; a missing
    or null field was not reported."""
    kept: dict[str, float] = {}
    dropped: list[str] = []
    for name, (lo, hi) in RANGES.items():
        raw = sample.get(name)
        if raw is None:
            continue
        value = finite(raw)
        if value is None:
            dropped.append(f"{name}: not a finite number")
        elif not lo <= value <= hi:
            dropped.append(f"{name}: {value:g} is outside {lo:g}..{hi:g}")
        else:
            kept[name] = value
    used, total = kept.get("mem_used_mb"), kept.get("mem_total_mb")
    if used is not None and total is not None and used > total:
        del kept["mem_used_mb"]
        dropped.append(f"mem_used_mb: {used:g} is over the card's {total:g}")
    draw, cap = kept.get("power_w"), kept.get("power_limit_w")
    if draw is not None and cap is not None and draw > 1.5 * cap:
        del kept["power_w"]
        dropped.append(f"power_w: {draw:g} is far over its {cap:g} W limit")
    return Vitals(**kept), tuple(dropped)
