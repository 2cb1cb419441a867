"""`[bids]` of a scenario: how hard other renters press on the interruptible tier (vast-ai/docs
`instance-types.mdx`; the model: `app/sim/bids.py`; the format: docs/scenarios.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..core.errors import ConfigError
from .scenario_tables import bounded, checked, checked_value, choice


@dataclass(frozen=True)
class Bids:
    # each machine's min_bid floor, as a share of its on-demand dph_base (drawn per machine);
    # Vast's FAQ says the tier "saves 50-80%" (vast-ai/docs guides/reference/faq/rental-types.mdx)
    floor: tuple[float, float] = bounded((0.30, 0.55), above=True)
    drift: float = bounded(0.25, hi=0.9)  # the floor moves by up to this share, window to window
    # one draw of the floor and of an arriving rival holds this long
    window_min: float = bounded(15.0, 1.0, 1440.0)
    # rivals arriving per machine-hour, for a model not in gpu_pressure
    pressure: float = bounded(0.5, hi=60.0)
    gpu_pressure: dict[str, float] = field(default_factory=dict)  # per model
    day_swing: float = 0.5  # the pressure swings by this share over the UTC day
    peak_hour: float = bounded(15.0, hi=24.0)  # UTC hour of the day's highest pressure
    rival_bid: tuple[float, float] = bounded((0.9, 1.7), hi=10.0, above=True)  # x the floor
    ondemand: float = 0.2  # share of rivals who rent on-demand (they beat any bid)
    # how long a rival holds the machine
    hold_min: tuple[float, float] = bounded((10.0, 120.0), hi=7 * 1440.0, above=True)
    # the share of hosts whose floor is not a discount but `near` x their on-demand price
    near_share: float = 0.0
    near: tuple[float, float] = bounded((0.85, 1.0), hi=2.0, above=True)
    # what a winning bid pays: "bid" (its own bid: pay-as-bid) or "clearing" (what it had to
    # beat: the floor or the best rival bid, never above its own). No source says which
    pricing: str = choice("bid", "clearing")

    def pressure_for(self, gpu: str) -> float:
        return self.gpu_pressure.get(gpu, self.pressure)


def parse_bids(raw: Any) -> Bids:
    """The `[bids]` table, checked (absent keys keep their defaults)."""
    given: dict[str, Any] = {}
    if isinstance(raw, dict) and "gpu_pressure" in raw:
        table = raw["gpu_pressure"]
        if not isinstance(table, dict):
            raise ConfigError("bids.gpu_pressure: expected a table of model = rivals/hour")
        pressure = next(f for f in fields(Bids) if f.name == "pressure")
        given["gpu_pressure"] = {
            str(g): checked_value(v, pressure, f"bids.gpu_pressure.{g}") for g, v in table.items()
        }
    bids: Bids = checked(Bids, raw, "bids", **given)
    return bids
