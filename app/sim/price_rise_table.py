"""`[price_rise]` of a scenario: hosts that raise their price under a held rental (the model:
`app/sim/price_rises.py`; the format: docs/scenarios.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .scenario_tables import bounded, checked


@dataclass(frozen=True)
class PriceRise:
    share: float = 0.0
    factor: tuple[float, float] = bounded((1.15, 1.6), 1.0, 10.0)
    after_min: tuple[float, float] = bounded((10.0, 60.0), 0.0, 30 * 1440.0)
    notice_min: tuple[float, float] = bounded((20.0, 60.0), 1.0, 1440.0)
    keep_old: float = 0.0


def parse_price_rise(raw: Any) -> PriceRise:
    """The `[price_rise]` table, checked (absent keys keep their defaults)."""
    rise: PriceRise = checked(PriceRise, raw, "price_rise")
    return rise
