"""`[bids]` of a scenario: how hard other renters press on the interruptible tier (vast-ai/docs
`instance-types.mdx`; the model: `app/sim/bids.py`; the format: docs/scenarios.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ConfigError


@dataclass(frozen=True)
class Bids:
    # each machine's min_bid floor, as a share of its on-demand dph_base (drawn per machine);
    # Vast's FAQ says the tier "saves 50-80%" (vast-ai/docs guides/reference/faq/rental-types.mdx)
    floor: tuple[float, float] = (0.30, 0.55)
    drift: float = 0.25  # the floor moves by up to this share of itself, window to window
    window_min: float = 15.0  # one draw of the floor and of an arriving rival holds this long
    pressure: float = 0.5  # rivals arriving per machine-hour, for a model not in gpu_pressure
    gpu_pressure: dict[str, float] = field(default_factory=dict)  # per model
    day_swing: float = 0.5  # the pressure swings by this share over the UTC day
    peak_hour: float = 15.0  # UTC hour of the day's highest pressure
    rival_bid: tuple[float, float] = (0.9, 1.7)  # a rival's bid, times the floor
    ondemand: float = 0.2  # share of rivals who rent on-demand (they beat any bid)
    hold_min: tuple[float, float] = (10.0, 120.0)  # how long a rival holds the machine
    # the share of hosts whose floor is not a discount but `near` x their on-demand price
    near_share: float = 0.0
    near: tuple[float, float] = (0.85, 1.0)
    # what a winning bid pays: "bid" (its own bid: pay-as-bid) or "clearing" (what it had to
    # beat: the floor or the best rival bid, never above its own). No source says which
    pricing: str = "bid"

    def pressure_for(self, gpu: str) -> float:
        return self.gpu_pressure.get(gpu, self.pressure)


def _number(raw: dict[str, Any], key: str, lo: float, hi: float) -> float:
    v = raw[key]
    if not isinstance(v, int | float) or isinstance(v, bool) or not lo <= v <= hi:
        raise ConfigError(f"bids.{key}: expected a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _pair(raw: dict[str, Any], key: str, hi: float) -> tuple[float, float]:
    v = raw[key]
    ok = (
        isinstance(v, list)
        and len(v) == 2
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in v)
        and 0 < v[0] <= v[1] <= hi
    )
    if not ok:
        raise ConfigError(f"bids.{key}: expected [low, high] with 0 < low <= high <= {hi}")
    return float(v[0]), float(v[1])


def parse_bids(raw: Any) -> Bids:
    """The `[bids]` table, checked (absent keys keep their defaults)."""
    if raw is None:
        return Bids()
    if not isinstance(raw, dict):
        raise ConfigError("bids: expected a table")
    kw: dict[str, Any] = {}
    limits = {
        "drift": (0.0, 0.9),
        "window_min": (1.0, 1440.0),
        "pressure": (0.0, 60.0),
        "day_swing": (0.0, 1.0),
        "peak_hour": (0.0, 24.0),
        "ondemand": (0.0, 1.0),
        "near_share": (0.0, 1.0),
    }
    pairs = {"floor": 1.0, "rival_bid": 10.0, "hold_min": 7 * 1440.0, "near": 2.0}
    for key in raw:
        if key in limits:
            kw[key] = _number(raw, key, *limits[key])
        elif key in pairs:
            kw[key] = _pair(raw, key, pairs[key])
        elif key == "pricing":
            if raw[key] not in ("bid", "clearing"):
                raise ConfigError(f'bids.pricing: expected "bid" or "clearing", got {raw[key]!r}')
            kw[key] = raw[key]
        elif key == "gpu_pressure":
            table = raw[key]
            if not isinstance(table, dict):
                raise ConfigError("bids.gpu_pressure: expected a table of model = rivals/hour")
            kw[key] = {str(g): _number(table, g, 0.0, 60.0) for g in table}
        else:
            known = sorted([*limits, *pairs, "gpu_pressure", "pricing"])
            raise ConfigError(f"bids: unknown key {key!r} (known: {', '.join(known)})")
    return Bids(**kw)
