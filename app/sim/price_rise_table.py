"""`[price_rise]` of a scenario: hosts that raise their price under a held rental (the model:
`app/sim/price_rises.py`; the format: docs/scenarios.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import ConfigError


@dataclass(frozen=True)
class PriceRise:
    share: float = 0.0
    factor: tuple[float, float] = (1.15, 1.6)
    after_min: tuple[float, float] = (10.0, 60.0)
    notice_min: tuple[float, float] = (20.0, 60.0)
    keep_old: float = 0.0


def _pair(raw: dict[str, Any], key: str, lo: float, hi: float) -> tuple[float, float]:
    v = raw[key]
    ok = (
        isinstance(v, list)
        and len(v) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
        and lo <= v[0] <= v[1] <= hi
    )
    if not ok:
        raise ConfigError(
            f"price_rise.{key}: expected [low, high] with {lo} <= low <= high <= {hi}"
        )
    return float(v[0]), float(v[1])


def parse_price_rise(raw: Any) -> PriceRise:
    """The `[price_rise]` table, checked (absent keys keep their defaults)."""
    if raw is None:
        return PriceRise()
    if not isinstance(raw, dict):
        raise ConfigError("price_rise: expected a table")
    kw: dict[str, Any] = {}
    pairs = {"factor": (1.0, 10.0), "after_min": (0.0, 30 * 1440.0), "notice_min": (1.0, 1440.0)}
    for key, v in raw.items():
        if key in ("share", "keep_old"):
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1:
                raise ConfigError(f"price_rise.{key}: expected a share in [0, 1], got {v!r}")
            kw[key] = float(v)
        elif key in pairs:
            kw[key] = _pair(raw, key, *pairs[key])
        else:
            known = ", ".join(sorted(["share", "keep_old", *pairs]))
            raise ConfigError(f"price_rise: unknown key {key!r} (known: {known})")
    return PriceRise(**kw)
