"""Scenario files (TOML): the market a simulator serves, its tables as frozen values each checked
from its dataclass's fields by one `checked` (the format: docs/scenarios.md)."""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import Field, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, cast

from ..core.errors import ConfigError
from ..core.preflight.gpu_specs import DPH_RANGE
from ..core.text import clean
from .images import ImageSpec

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
# a behaviour's own defaults: a slow_net host's downloads run at a few percent of its inet_down,
# so its pull drags on too
BEHAVIOUR_KNOBS: dict[str, dict[str, Any]] = {
    "slow_pull": {"pull_min": [14.0, 30.0], "extract_min": [2.0, 5.0]},
    "slow_net": {"pull_min": [40.0, 90.0]},
}

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
    unnamed_name: str = field(default="provisioning", metadata={"most": 40})
    build_output_share: float = 0.5
    contract_end_share: float = 0.0
    contract_end_min: tuple[float, float] = bounded((20.0, 240.0), hi=INF)


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
    lo, hi = f.metadata.get("lo", 0.0), f.metadata.get("hi", 1.0)
    above = f.metadata.get("above", False)
    if "choices" in f.metadata:
        if v not in f.metadata["choices"]:
            options = " or ".join(f'"{c}"' for c in f.metadata["choices"])
            raise ConfigError(f"{where}: expected {options}, got {v!r}")
        return v
    if isinstance(f.default, str):
        if not isinstance(v, str) or not v.strip() or len(v) > f.metadata.get("most", 200):
            raise ConfigError(f"{where}: expected a short name, got {v!r}")
        return v.strip()
    if f.default_factory is dict:  # a table of name = number, each bounded as the field says
        if not isinstance(v, dict):
            raise ConfigError(f"{where}: expected a table of name = number")
        each = cast("Field[Any]", field(default=0.0, metadata=f.metadata))
        return {str(k): checked_value(x, each, f"{where}.{k}") for k, x in v.items()}
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
    # per model; out of the hash (a dict has none), still compared (bids.py keeps its draws)
    gpu_pressure: dict[str, float] = field(default_factory=dict, hash=False, metadata={"hi": 60.0})
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
    behaviour, share = raw.get("behaviour"), raw.get("share")
    if behaviour not in ALL_BEHAVIOURS:
        raise ConfigError(
            f"{where}.behaviour: {behaviour!r} is not one of {', '.join(ALL_BEHAVIOURS)}"
        )
    if not isinstance(share, int | float) or isinstance(share, bool) or share < 0:
        raise ConfigError(f"{where}.share: expected a non-negative number, got {share!r}")
    unknown = [k for k in raw if k not in ("behaviour", "share", "gpu", "dph", *DEFAULT_KNOBS)]
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (knobs: {', '.join(DEFAULT_KNOBS)})"
        )
    gpus = _gpus(raw.get("gpu", gpu_default or CONSUMER_GPUS), f"{where}.gpu")
    dph = _range(raw.get("dph", DEFAULT_DPH), f"{where}.dph")
    knobs = DEFAULT_KNOBS | BEHAVIOUR_KNOBS.get(behaviour, {})
    knobs |= {k: list(_range(v, f"{where}.{k}")) for k, v in raw.items() if k in DEFAULT_KNOBS}
    return HostClass(behaviour, float(share), tuple(gpus), dph, knobs, "dph" not in raw)


# the values read as their fields declare (bool is an int); `name` and the webhook's are read apart
SCALARS = tuple(
    f.name
    for f in fields(Scenario)
    if isinstance(f.default, int | float | str) and f.name not in ("name", "webhook_secret")
)
# the small tables, each read into its dataclass by `checked`
TABLES = {f.name: f.default_factory for f in fields(Scenario) if is_dataclass(f.default_factory)}
OTHERS = ("storage_cost", "bandwidth_cost", "host_class", "image", "gpu", "name", "webhooks")
KEYS = {*SCALARS, *TABLES, *OTHERS}


def parse_scenario(data: dict[str, Any], name: str = "scenario") -> Scenario:
    for key in data:
        if key not in KEYS:
            raise ConfigError(f"unknown scenario key {key!r} (known: {', '.join(sorted(KEYS))})")
    of = {f.name: f for f in fields(Scenario)}
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
    hooks = data.get("webhooks", {})
    if not isinstance(hooks, dict) or set(hooks) - {"url", "secret"}:
        raise ConfigError("webhooks: expected a table with url and secret")
    url, secret = hooks.get("url"), hooks.get("secret", "")
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise ConfigError(f"webhooks.url: expected an http(s) URL, got {url!r}")
    if not isinstance(secret, str) or (url and not secret):
        raise ConfigError("webhooks.secret: expected the secret the events are signed with")
    tables = {key: checked(cls, data.get(key), key) for key, cls in TABLES.items()}
    if tables["hosts"].storage_spread == "log" and storage[0] <= 0:
        raise ConfigError("hosts.storage_spread: a log spread needs storage_cost above 0")
    return Scenario(
        **kw,
        **tables,
        webhook_url=url,
        webhook_secret=secret,
        storage_cost=storage,
        bandwidth_cost=bandwidth,
        host_classes=classes,
        name=str(data.get("name", name)),
        images=parse_images(data.get("image")),
    )


def parse_images(raw: Any) -> tuple[ImageSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("image: expected one or more [[image]] tables")
    out = []
    for i, entry in enumerate(raw):
        where = f"image[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a table")
        name, cuda = entry.get("name"), entry.get("cuda")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.name: expected an image name or glob")
        if cuda is not None and not (isinstance(cuda, str) and re.fullmatch(r"\d+\.\d+", cuda)):
            raise ConfigError(f'{where}.cuda: expected a version like "12.4", got {cuda!r}')
        spec: ImageSpec = checked(ImageSpec, entry, where, name=name, cuda=cuda)
        if not spec.python and spec.torch and "torch" in entry:
            raise ConfigError(f"{where}: torch without python3 cannot be imported")
        out.append(replace(spec, torch=spec.torch and spec.python))
    return tuple(out)


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
