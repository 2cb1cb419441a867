"""Scenario files (TOML): the market a simulator serves. Format documented in docs/scenarios.md."""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.preflight.gpu_specs import DPH_RANGE
from ..core.text import clean
from .images import ImageSpec, parse_images
from .scenario_tables import (
    INF,
    Bids,
    Churn,
    Faults,
    Hosts,
    Listing,
    PriceRise,
    SSHConfig,
    States,
    bounded,
    checked,
    checked_value,
    choice,
    is_number,
    parse_bids,
)

BEHAVIOURS = (
    "healthy",
    "slow_pull",
    "freeze_pull",
    "fatal_pull",
    "exited",
    "stale_driver",
    "misreported",
    "throttled",
    "offline_midrun",
    "ssh_dead",
)
# What a matmul does not exercise (their probe output: app/sim/probe_answers.py). Not in the
# article's default mix, so the default market stays the article's; a scenario names them.
CHECK_BEHAVIOURS = (
    "narrow_pcie",
    "short_vram",
    "slow_disk",
    "slow_net",
    "xid_mid_job",
    "forged_preflight",  # every CUDA call fails; it prints a good document kept for the purpose
)
ALL_BEHAVIOURS = BEHAVIOURS + CHECK_BEHAVIOURS
DELIVERING = frozenset({"healthy", "slow_pull", "throttled", "offline_midrun"})

# Per-behaviour timing knobs (minutes, as [low, high] ranges) and their defaults.
DEFAULT_KNOBS: dict[str, Any] = {
    "queue_min": [0.3, 1.5],
    "pull_min": [6.0, 16.0],
    "extract_min": [1.0, 4.0],
    "start_min": [0.2, 0.8],
    "freeze_at": [0.2, 0.8],  # share of the pull after which a freeze_pull host stops
    "fatal_at_min": [0.5, 8.0],
    "exit_after_min": [0.5, 3.0],
    "offline_after_min": [10.0, 60.0],
    "throttle_after_min": [3.0, 20.0],
    "throttle_drop": [0.15, 0.30],  # fraction the clocks drop by
    "misreport_speed": [0.3, 0.5],  # real speed as a share of the advertised model's
    "xid_after_min": [8.0, 30.0],  # xid_mid_job: minutes after running until the fatal XID
}
SLOW_PULL_KNOBS = {"pull_min": [14.0, 30.0], "extract_min": [2.0, 5.0]}
# a slow_net host's downloads run at a few percent of its inet_down: its pull drags on too
SLOW_NET_KNOBS = {"pull_min": [40.0, 90.0]}

# The article's mix: 62 of 100 creates never deliver.
SEED_MIX: tuple[dict[str, Any], ...] = (
    {"behaviour": "healthy", "share": 0.24},
    {"behaviour": "slow_pull", "share": 0.06},
    {"behaviour": "throttled", "share": 0.05},
    {"behaviour": "offline_midrun", "share": 0.03},
    {"behaviour": "freeze_pull", "share": 0.22},
    {"behaviour": "fatal_pull", "share": 0.12},
    {"behaviour": "exited", "share": 0.07},
    {"behaviour": "stale_driver", "share": 0.10},
    {"behaviour": "misreported", "share": 0.06},
    {"behaviour": "ssh_dead", "share": 0.05},
)
CONSUMER_GPUS = ["RTX 3060", "RTX 3070", "RTX 3080", "RTX 3090", "RTX 4070", "RTX 4080", "RTX 4090"]
DEFAULT_DPH = [0.12, 0.55]  # a host class's price range when its GPU has no row below
# $/h of one rented GPU by model, where a host class names no `dph` of its own: the real
# market's range for single-GPU offers in 2026, with its sources (core/gpu_specs.DPH_RANGE).
GPU_DPH: dict[str, tuple[float, float]] = dict(DPH_RANGE)


@dataclass(frozen=True)
class HostClass:
    behaviour: str
    share: float
    gpu: tuple[str, ...]
    dph: tuple[float, float]
    knobs: dict[str, Any]
    by_gpu: bool = False  # no `dph` given: each machine's price from its GPU (GPU_DPH)

    def price_range(self, gpu: str) -> tuple[float, float]:
        return GPU_DPH.get(gpu, self.dph) if self.by_gpu else self.dph


@dataclass(frozen=True)
class Scenario:
    seed: int = bounded(7, -INF, INF)
    time_scale: float = bounded(60.0, 0.0, INF, above=True)
    offers: int = bounded(60, 1, 100_000)
    bad_day: bool = False
    gpu_billing: str = choice("running", "created")
    storage_cost: tuple[float, float] = (0.10, 0.20)  # $/GB/month
    host_classes: tuple[HostClass, ...] = ()
    faults: Faults = field(default_factory=Faults)
    name: str = "scenario"
    images: tuple[ImageSpec, ...] = ()  # [[image]]: before the defaults (app/sim/images.py)
    ssh: SSHConfig = field(default_factory=SSHConfig)
    states: States = field(default_factory=States)
    listing: Listing = field(default_factory=Listing)
    # $/GB moved, per direction (Vast offers carry inet_up_cost / inet_down_cost)
    bandwidth_cost: tuple[float, float] = (0.002, 0.02)
    pacing: bool = True  # enforce the documented minimum intervals (429 inside one)
    # an account that already rents a fleet at the start (scale benchmarks): `preload`
    # instances on the first offers, labelled "preload:<n>", rented an hour of market time
    # earlier; the last `preload_booting` of them are rented at the start and still boot
    preload: int = bounded(0, 0, INF)
    preload_booting: int = bounded(0, 0, INF)
    # [webhooks] url and secret: where the market sends its signed events (sim/webhooks_out.py)
    webhook_url: str | None = None
    webhook_secret: str = ""
    preload_label: str = "preload"  # their labels are "<preload_label>:<n>" (a campaign's own,
    # "rw:<campaign>", makes them that campaign's rentals)
    bids: Bids = field(default_factory=Bids)  # `[bids]`: the interruptible tier's rivals
    churn: Churn = field(default_factory=Churn)  # `[churn]`: listings taken and relisted
    hosts: Hosts = field(default_factory=Hosts)  # `[hosts]`: lines, listed reliability
    # the share of bid creates the market rents on-demand instead, at the on-demand price (a
    # create without its bid price rents on-demand, and its answer does not say which type it
    # rented: vast-cli SKILL.md, PR #403); 0: every bid create is a bid rental
    bid_rents_on_demand: float = 0.0
    # `[price_rise]`: hosts that raise their price under a held rental (sim/price_rises.py)
    price_rise: PriceRise = field(default_factory=PriceRise)

    def shares(self) -> dict[str, float]:
        """Behaviour -> share of the machines, after the bad-day scaling."""
        raw: dict[str, float] = {}
        for hc in self.host_classes:
            raw[hc.behaviour] = raw.get(hc.behaviour, 0.0) + hc.share
        total = sum(raw.values()) or 1.0
        shares = {b: s / total for b, s in raw.items()}
        if self.bad_day:
            bad = sum(s for b, s in shares.items() if b not in DELIVERING)
            good = 1.0 - bad
            if bad > 0 and good > 0:
                shares = {
                    b: (s * 0.75 / bad if b not in DELIVERING else s * 0.25 / good)
                    for b, s in shares.items()
                }
        return shares


def _range(value: Any, where: str) -> tuple[float, float]:
    if is_number(value):
        return float(value), float(value)
    if isinstance(value, list) and len(value) == 2 and all(is_number(v) for v in value):
        lo, hi = float(value[0]), float(value[1])
        if lo > hi or lo < 0:
            raise ConfigError(f"{where}: range [{lo}, {hi}] must be increasing and non-negative")
        return lo, hi
    raise ConfigError(f"{where}: expected a number or [low, high], got {value!r}")


def _gpus(gpus: Any, where: str) -> list[str]:
    if isinstance(gpus, str):
        gpus = [gpus]
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, str) for g in gpus):
        raise ConfigError(f"{where}: expected a list of GPU names")
    return gpus


def _host_class(raw: Any, index: int, gpu_default: list[str] | None = None) -> HostClass:
    where = f"host_class[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    behaviour = raw.get("behaviour")
    if behaviour not in ALL_BEHAVIOURS:
        raise ConfigError(
            f"{where}.behaviour: {behaviour!r} is not one of {', '.join(ALL_BEHAVIOURS)}"
        )
    share = raw.get("share")
    if not isinstance(share, int | float) or isinstance(share, bool) or share < 0:
        raise ConfigError(f"{where}.share: expected a non-negative number, got {share!r}")
    gpus = _gpus(raw.get("gpu", gpu_default or CONSUMER_GPUS), f"{where}.gpu")
    dph = _range(raw.get("dph", DEFAULT_DPH), f"{where}.dph")
    knobs = dict(DEFAULT_KNOBS)
    if behaviour == "slow_pull":
        knobs.update(SLOW_PULL_KNOBS)
    elif behaviour == "slow_net":
        knobs.update(SLOW_NET_KNOBS)
    for key, value in raw.items():
        if key in ("behaviour", "share", "gpu", "dph"):
            continue
        if key not in DEFAULT_KNOBS:
            raise ConfigError(f"{where}: unknown key {key!r} (knobs: {', '.join(DEFAULT_KNOBS)})")
        knobs[key] = list(_range(value, f"{where}.{key}"))
    return HostClass(behaviour, float(share), tuple(gpus), dph, knobs, "dph" not in raw)


SCALARS = (
    "seed",
    "time_scale",
    "offers",
    "bad_day",
    "gpu_billing",
    "pacing",
    "preload",
    "preload_booting",
    "bid_rents_on_demand",
)
TABLES = ("faults", "ssh", "states", "listing", "bids", "churn", "hosts", "price_rise", "webhooks")
OTHERS = ("storage_cost", "bandwidth_cost", "host_class", "image", "gpu", "name", "preload_label")
KEYS = {*SCALARS, *TABLES, *OTHERS}


def parse_scenario(data: dict[str, Any], name: str = "scenario") -> Scenario:
    for key in data:
        if key not in KEYS:
            raise ConfigError(f"unknown scenario key {key!r} (known: {', '.join(sorted(KEYS))})")
    of = {f.name: f for f in dataclasses.fields(Scenario)}
    kw = {k: checked_value(data[k], of[k], k) for k in SCALARS if k in data}
    offers, preload = kw.get("offers", Scenario.offers), kw.get("preload", 0)
    if preload > offers:
        raise ConfigError(f"preload: expected an integer in 0..offers ({offers}), got {preload!r}")
    if kw.get("preload_booting", 0) > preload:
        raise ConfigError("preload_booting: expected an integer in 0..preload")
    raw_classes = data.get("host_class")
    if raw_classes is None:
        raw_classes = [dict(c) for c in SEED_MIX]
    if not isinstance(raw_classes, list) or not raw_classes:
        raise ConfigError("host_class: expected one or more [[host_class]] tables")
    # `gpu` at the top: the models of every host class that names none of its own
    gpu_default = None if data.get("gpu") is None else _gpus(data["gpu"], "gpu")
    classes = tuple(_host_class(c, i, gpu_default) for i, c in enumerate(raw_classes))
    if sum(c.share for c in classes) <= 0:
        raise ConfigError("host_class: the shares add up to zero")
    storage = _range(data.get("storage_cost", [0.10, 0.20]), "storage_cost")
    bandwidth = _range(data.get("bandwidth_cost", [0.002, 0.02]), "bandwidth_cost")
    preload_label = data.get("preload_label", "preload")
    if not isinstance(preload_label, str) or not preload_label.strip():
        raise ConfigError(f"preload_label: expected a label, got {preload_label!r}")
    hooks = data.get("webhooks", {})
    if not isinstance(hooks, dict) or set(hooks) - {"url", "secret"}:
        raise ConfigError("webhooks: expected a table with url and secret")
    url, secret = hooks.get("url"), hooks.get("secret", "")
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise ConfigError(f"webhooks.url: expected an http(s) URL, got {url!r}")
    if not isinstance(secret, str) or (url and not secret):
        raise ConfigError("webhooks.secret: expected the secret the events are signed with")
    return Scenario(
        **kw,
        webhook_url=url,
        webhook_secret=secret,
        storage_cost=storage,
        host_classes=classes,
        faults=checked(Faults, data.get("faults"), "faults"),
        name=str(data.get("name", name)),
        images=parse_images(data.get("image")),
        ssh=checked(SSHConfig, data.get("ssh"), "ssh"),
        states=_states(data.get("states")),
        listing=checked(Listing, data.get("listing"), "listing"),
        bandwidth_cost=bandwidth,
        preload_label=preload_label,
        bids=parse_bids(data.get("bids")),
        price_rise=checked(PriceRise, data.get("price_rise"), "price_rise"),
        churn=checked(Churn, data.get("churn"), "churn"),
        hosts=_hosts(data.get("hosts"), storage),
    )


def _states(raw: Any) -> States:
    given: dict[str, Any] = {}
    if isinstance(raw, dict) and "unnamed_name" in raw:
        name = raw["unnamed_name"]
        if not isinstance(name, str) or not name.strip() or len(name) > 40:
            raise ConfigError(f"states.unnamed_name: expected a short status word, got {name!r}")
        given["unnamed_name"] = name.strip()
    if isinstance(raw, dict) and "contract_end_min" in raw:
        given["contract_end_min"] = _range(raw["contract_end_min"], "states.contract_end_min")
    states: States = checked(States, raw, "states", **given)
    return states


def _hosts(raw: Any, storage: tuple[float, float]) -> Hosts:
    hosts: Hosts = checked(Hosts, raw, "hosts")
    if hosts.storage_spread == "log" and storage[0] <= 0:
        raise ConfigError("hosts.storage_spread: a log spread needs storage_cost above 0")
    return hosts


def load_scenario(path: str | Path | None) -> Scenario:
    """Read a scenario file; None gives the article's default market."""
    if path is None:
        return parse_scenario({}, "default")
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read scenario {p}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    try:
        return parse_scenario(data, p.stem)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None  # which file, as the TOML error says


def to_toml(data: dict[str, Any], comment: str = "") -> str:
    """Scenario data (as `parse_scenario` takes it) as a file `load_scenario` reads back: its
    values, then its tables, then its `[[host_class]]` tables."""

    def val(v: Any) -> str:
        if isinstance(v, str):  # cleaned: a TOML basic string cannot hold control characters
            return '"' + clean(v, 200).replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):  # an inline table; its keys (GPU names) quoted
            return "{ " + ", ".join(f"{val(str(k))} = {val(x)}" for k, x in v.items()) + " }"
        return repr(v)

    def table(head: str, t: dict[str, Any]) -> list[str]:
        return ["", head] + [f"{k} = {val(v)}" for k, v in t.items()]

    lines = [f"# {comment}"] if comment else []
    lines += [
        f"{k} = {val(v)}" for k, v in data.items() if k != "host_class" and not isinstance(v, dict)
    ]
    for key, value in data.items():
        if isinstance(value, dict):
            lines += table(f"[{key}]", value)
    for hc in data.get("host_class", []):
        lines += table("[[host_class]]", hc)
    return "\n".join(lines) + "\n"
