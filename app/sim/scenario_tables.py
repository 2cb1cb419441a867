"""The smaller tables of a scenario, as frozen values with their defaults: `[faults]`, `[ssh]`,
`[listing]`, `[churn]`, `[hosts]`, `[states]`, `[price_rise]` and `[bids]` (the format:
docs/scenarios.md)."""

from __future__ import annotations

import math
from dataclasses import Field, dataclass, field, fields
from typing import Any

from ..core.errors import ConfigError

INF = math.inf


def bounded(default: Any, lo: float = 0.0, hi: float = 1.0, *, above: bool = False) -> Any:
    """A field whose number or [low, high] pair lies in lo..hi (above: low > lo); a number field
    declared without it is a share, 0 to 1."""
    return field(default=default, metadata={"lo": lo, "hi": hi, "above": above})


def choice(default: str, *others: str) -> Any:
    return field(default=default, metadata={"choices": (default, *others)})


@dataclass(frozen=True)
class Faults:
    rate_429: float = 0.0
    rate_5xx: float = 0.0
    rate_timeout: float = 0.0
    rate_malformed: float = 0.0
    ssh_drop: float = 0.0
    rate_redirect: float = 0.0  # answered with a 307 to the same call (it must keep its key)
    timeout_s: float = bounded(15.0, hi=INF)  # how long a "slow" answer stalls (wall seconds)


@dataclass(frozen=True)
class SSHConfig:
    """`[ssh]`: like Vast, every running instance has a proxy route and a share of hosts a direct
    one; the proxy drops a share of sessions."""

    direct_share: float = 0.5
    proxy_drop: float = 0.0
    # share of instances whose SSH sessions carry CONTAINER_ID and CONTAINER_API_KEY. None: as
    # Vast does it, by image: only Vast's own images (`vastai/...`) export them to SSH sessions;
    # on any other the container's variables reach a session only through the onstart recipe
    # `env >> /etc/environment` (vast-ai/docs guides/instances/docker-environment.mdx)
    container_env: float | None = None
    # share of instances where a session can read PID 1's environment (/proc/1/environ: the
    # watchdog's fallback; a host may run sessions as a user that cannot)
    proc_environ: float = 1.0


@dataclass(frozen=True)
class Listing:
    """`[listing]`: what the search shows besides the scenario's verified `offers`: unverified,
    deverified and external shares on top (the official CLI filters them out by default), and the
    share of creates that find the offer just taken."""

    unverified: float = 0.2
    external: float = 0.1
    taken: float = 0.0
    deverified: float = 0.0


@dataclass(frozen=True)
class Churn:
    """`[churn]`: each machine listed a share of the time (`presence`, log-uniform in [low, high])
    window by window; with `relist_new_id` a listing carries one of three offer ids. The default
    is always listed, one id."""

    presence: tuple[float, float] = bounded((1.0, 1.0), above=True)
    window_min: float = bounded(30.0, 1.0, INF)
    relist_new_id: bool = False


@dataclass(frozen=True)
class Hosts:
    """`[hosts]`: what the offers say of a host: the share on a fast line, how far `reliability2`
    predicts delivery (0 to 1), the storage price's spread, and the share of multi-GPU machines.
    None keeps the flat draws."""

    inet_fast_share: float | None = None
    reliability_signal: float | None = None
    storage_spread: str = choice("uniform", "log")
    multi_gpu_share: float = 0.0


@dataclass(frozen=True)
class States:
    """`[states]`: how unkind the boot is: `scheduling`, a state no list names, build output in the
    status line, and the market's own stops at a contract's end."""

    scheduling_share: float = 0.3
    unnamed_share: float = 0.1  # rentwatch leaves unknown states to its deadlines
    unnamed_name: str = "provisioning"
    build_output_share: float = 0.5
    contract_end_share: float = 0.0
    contract_end_min: tuple[float, float] = (20.0, 240.0)


@dataclass(frozen=True)
class PriceRise:
    """`[price_rise]`: hosts that raise their price under a held rental (sim/price_rises.py)."""

    share: float = 0.0
    factor: tuple[float, float] = bounded((1.15, 1.6), 1.0, 10.0)
    after_min: tuple[float, float] = bounded((10.0, 60.0), 0.0, 30 * 1440.0)
    notice_min: tuple[float, float] = bounded((20.0, 60.0), 1.0, 1440.0)
    keep_old: float = 0.0


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def checked_value(v: Any, f: Field[Any], where: str) -> Any:
    """One value of a table, checked against its field's kind and bounds."""
    lo, hi = f.metadata.get("lo", 0.0), f.metadata.get("hi", 1.0)
    above = f.metadata.get("above", False)
    if "choices" in f.metadata:
        if v not in f.metadata["choices"]:
            options = " or ".join(f'"{c}"' for c in f.metadata["choices"])
            raise ConfigError(f"{where}: expected {options}, got {v!r}")
        return v
    if isinstance(f.default, bool):
        if not isinstance(v, bool):
            raise ConfigError(f"{where}: expected true or false, got {v!r}")
        return v
    if isinstance(f.default, tuple):
        ok = isinstance(v, list) and len(v) == 2 and all(is_number(x) for x in v)
        if not ok or not (v[0] > lo if above else v[0] >= lo) or not v[0] <= v[1] <= hi:
            low = f"{lo} < low" if above else f"{lo} <= low"
            raise ConfigError(f"{where}: expected [low, high] with {low} <= high <= {hi}")
        return float(v[0]), float(v[1])
    if isinstance(f.default, int) and not isinstance(f.default, float):
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            bounds = f" in {lo}..{hi}" if lo > -INF else ""
            raise ConfigError(f"{where}: expected an integer{bounds}, got {v!r}")
        return v
    if not is_number(v) or not lo <= v <= hi or (above and v <= lo):
        bounds = f"above {lo}" if above else f"in [{lo}, {hi}]"
        raise ConfigError(f"{where}: expected a number {bounds}, got {v!r}")
    return float(v)


def checked(cls: Any, raw: Any, table: str, **given: Any) -> Any:
    """`[table]` read into `cls` (absent keys keep their defaults; `given` are read already)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{table}: expected a table")
    known = {f.name: f for f in fields(cls)}
    kw = dict(given)
    for key, v in raw.items():
        if key not in known:
            raise ConfigError(f"{table}: unknown key {key!r} (known: {', '.join(known)})")
        if key not in given:
            kw[key] = checked_value(v, known[key], f"{table}.{key}")
    return cls(**kw)


@dataclass(frozen=True)
class Bids:
    """`[bids]`: how hard other renters press on the interruptible tier (vast-ai/docs
    `instance-types.mdx`; the model: `bids.py`)."""

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
