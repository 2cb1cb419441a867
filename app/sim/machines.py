"""The market's machines: what each host is and the offer it lists. Randomness is keyed by (seed,
machine, ...), so a seeded market is the same whatever order a client rents it in."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.billing import storage_per_hour
from ..core.preflight.gpu_specs import GPU_SPECS
from .scenario import DELIVERING, HostClass, Scenario

DRIVER_FOR_CUDA = {
    12.1: "530.41.03",
    12.2: "535.183.01",
    12.4: "550.54.14",
    12.6: "560.35.03",
    12.8: "570.124.04",
}

DISK_BW_MB_S = 2000.0  # what every offer lists of its disk

# Vast's geolocation reads "City, CC" (or just "CC" where the city is unknown)
CITIES = {
    "US": ("Dallas", "Ashburn", "San Jose", "Chicago", "Kansas City"),
    "CA": ("Quebec", "Toronto", "Montreal"),
    "DE": ("Frankfurt", "Nuremberg", "Berlin"),
    "PL": ("Warsaw", "Krakow"),
    "SE": ("Stockholm", "Gothenburg"),
    "FR": ("Paris", "Roubaix"),
    "GB": ("London", "Manchester"),
    "JP": ("Tokyo", "Osaka"),
    "BR": ("Sao Paulo",),
    "VN": ("Hanoi", "Ho Chi Minh City"),
    "RO": ("Bucharest",),
    "ES": ("Madrid", "Valencia"),
}


def keyed_rng(*key: Any) -> random.Random:
    digest = hashlib.sha256(repr(key).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass
class Machine:
    id: int
    host_id: int
    offer_id: int
    behaviour: str
    advertised_gpu: str
    real_gpu: str
    real_tflops: float
    dph_base: float
    storage_cost: float
    cuda_max_good: float
    driver_version: str
    reliability: float
    geolocation: str
    inet_up: float
    inet_down: float
    knobs: dict[str, Any]
    rentals: int = 0
    direct: bool = False  # has a direct SSH route besides the proxy
    proxy_addr: str = "127.0.0.2"  # the sshN relay this host's proxy route goes through
    direct_addr: str = "127.1.0.2"  # the host's own (loopback) address
    inet_up_cost: float = 0.0  # $/GB
    inet_down_cost: float = 0.0
    contract_end: float | None = None  # the host's listing ends: rentals are stopped then
    verification: str = "verified"  # Vast's verdict: "verified", "unverified", "deverified"
    external: bool = False  # listed from outside Vast's own marketplace
    taken_until: float | None = None  # another renter holds it until then
    asked: int = 0  # creates asked of it (each may find it taken meanwhile)
    presence: float | None = None  # share of the time it is listed (`[churn]`, sim/churn.py)
    num_gpus: int = 1  # rented whole: `dph_base` and `min_bid` are the machine's, all its GPUs

    @property
    def gpu_dph(self) -> float:
        """The on-demand $/h in rentwatch's words: the referee reads the truth without Vast's."""
        return self.dph_base

    @property
    def verified(self) -> bool:
        """What the offer's `verified` says: a deverified machine is not verified either."""
        return self.verification == "verified"

    def facts(self) -> dict[str, Any]:
        """What an offer and an instance's row both say of the machine."""
        return {
            "machine_id": self.id,
            "host_id": self.host_id,
            "gpu_name": self.advertised_gpu,
            "num_gpus": self.num_gpus,
            "gpu_ram": vram_mb(self.advertised_gpu),
            "storage_cost": self.storage_cost,
            "reliability2": self.reliability,
            "verification": self.verification,
            "cuda_max_good": self.cuda_max_good,
            "driver_version": self.driver_version,
            "cpu_cores_effective": 8.0,
            "cpu_ram": 32000,
            "inet_up": self.inet_up,
            "inet_down": self.inet_down,
            "geolocation": self.geolocation,
            "direct_port_count": 20 if self.direct else 0,
            "end_date": self.contract_end,
        }

    def offer_json(
        self, allocated_storage: float, now: float, min_bid: float, offer_id: int
    ) -> dict[str, Any]:
        spec = GPU_SPECS.get(self.advertised_gpu)
        claimed = spec.bf16_tflops if spec else 60.0
        storage_h = storage_per_hour(allocated_storage, self.storage_cost)
        return self.facts() | {
            "id": offer_id,
            "ask_contract_id": offer_id,
            "bundle_id": offer_id,
            "gpu_total_ram": vram_mb(self.advertised_gpu) * self.num_gpus,
            "dph_base": round(self.dph_base, 6),
            "dph_total": round(self.dph_base + storage_h, 6),
            "storage_total_cost": round(storage_h, 6),
            "disk_space": 500.0,
            "disk_bw": DISK_BW_MB_S,
            "disk_name": "nvme",
            "reliability": self.reliability,
            "verified": self.verified,
            "external": self.external,
            "rentable": True,
            "rented": False,
            "compute_cap": 860,
            "dlperf": round(
                (self.real_tflops if self.behaviour == "misreported" else claimed) / 3, 2
            ),
            "total_flops": claimed / 2,
            "dlperf_per_dphtotal": 0.0,
            "inet_up_cost": self.inet_up_cost,
            "inet_down_cost": self.inet_down_cost,
            "score": round(self.reliability * 100 / max(self.dph_base, 0.01), 2),
            "pcie_bw": 12.5,
            "cpu_ghz": 3.6,
            "cpu_name": "AMD Ryzen 9 5950X",
            # seconds left on the host's listing (positive, as on the real market)
            "duration": round(max(60.0, self.contract_end - now), 1)
            if self.contract_end is not None
            else 30 * 86400.0,
            # the bid to beat now (app/sim/bids.py; it moves); no `is_bid`: see fidelity.md
            "min_bid": min_bid,
            "start_date": None,
            "hosting_type": 0,
        }


def vram_mb(model: str) -> int:
    spec = GPU_SPECS.get(model)
    return spec.vram_mb if spec else 24576


def nvml_name(model: str) -> str:
    """How NVML spells a model: consumer cards carry "GeForce", the rest only "NVIDIA"."""
    if model.startswith("RTX") and not model.startswith("RTX A"):
        return f"NVIDIA GeForce {model}"
    return f"NVIDIA {model}"


def build_machines(
    sc: Scenario,
    now: Callable[[], float],
    n: int | None = None,
    key: str = "market",
    ids: range = range(1000, 60000),
) -> list[Machine]:
    """The scenario's machines (or `n` more, under `key` from `ids`), shared out by host class."""
    rng = keyed_rng(sc.seed, key)
    shares = sc.shares()
    n = sc.offers if n is None else n
    exact = {b: s * n for b, s in shares.items()}
    counts = {b: int(v) for b, v in exact.items()}
    for b in sorted(exact, key=lambda b: exact[b] - counts[b], reverse=True)[
        : n - sum(counts.values())
    ]:
        counts[b] += 1
    behaviours = [b for b, c in counts.items() for _ in range(c)]
    rng.shuffle(behaviours)
    classes: dict[str, list[HostClass]] = {}
    for hc in sc.host_classes:
        classes.setdefault(hc.behaviour, []).append(hc)
    machines = []
    machine_ids = rng.sample(ids, n)
    host_ids = rng.sample(range(10000, 99999), max(1, n * 2 // 3))
    for i, behaviour in enumerate(behaviours):
        hc = rng.choice(classes[behaviour])
        gpu = rng.choice(hc.gpu)
        spec = GPU_SPECS.get(gpu)
        tflops = spec.bf16_tflops if spec else 50.0
        real_gpu = gpu
        if behaviour == "misreported":
            slower = [s for s in GPU_SPECS.values() if s.bf16_tflops < tflops * 0.6]
            if slower:
                pick = rng.choice(slower)
                real_gpu, tflops = pick.name, pick.bf16_tflops
            else:
                tflops *= rng.uniform(*hc.knobs["misreport_speed"])
        tflops *= rng.uniform(0.92, 1.05)
        cuda = rng.choice([12.1, 12.2, 12.4, 12.4, 12.6, 12.8, 12.8])
        driver = DRIVER_FOR_CUDA[cuda]
        if behaviour == "stale_driver":
            # an old driver under an offer that still claims a newer CUDA (the host's daemon
            # reports what the image asked for; the driver cannot serve it)
            cuda = rng.choice([12.4, 12.6, 12.8])
            driver = rng.choice(["525.147.05", "530.41.03", "535.183.01"])
        reliability = round(
            rng.uniform(0.90, 0.999) if behaviour != "fatal_pull" else rng.uniform(0.80, 0.99),
            4,
        )
        machines.append(
            Machine(
                id=machine_ids[i],
                host_id=host_ids[i % len(host_ids)] if rng.random() < 0.5 else rng.choice(host_ids),
                offer_id=2_000_000 + machine_ids[i] * 10 + rng.randrange(10),
                behaviour=behaviour,
                advertised_gpu=gpu,
                real_gpu=real_gpu,
                real_tflops=tflops,
                dph_base=round(rng.uniform(*hc.price_range(gpu)), 4),
                storage_cost=_storage(rng.uniform(*sc.storage_cost), sc),
                cuda_max_good=cuda,
                driver_version=driver,
                reliability=reliability,
                geolocation=rng.choice(list(CITIES)),
                inet_up=round(rng.uniform(50, 900), 1),
                inet_down=round(rng.uniform(100, 1500), 1),
                knobs=hc.knobs,
            )
        )
    for m in machines:
        _unkind(m, sc, now)
    return machines


def _storage(x: float, sc: Scenario) -> float:
    """A machine's storage $/GB-month from its draw `x` over `storage_cost`, log-uniform where
    `[hosts] storage_spread` says so."""
    lo, hi = sc.storage_cost
    if sc.hosts.storage_spread == "log" and hi > lo > 0:
        x = lo * (hi / lo) ** ((x - lo) / (hi - lo))
    return round(x, 4)


def _unkind(m: Machine, sc: Scenario, now: Callable[[], float]) -> None:
    """Routes, bandwidth prices, the city and the listing's end: drawn apart from the
    behaviour's own draws, so adding them left every seeded market as it was."""
    rng = keyed_rng(sc.seed, "unkind", m.id)
    m.direct = rng.random() < sc.ssh.direct_share
    m.proxy_addr = f"127.0.0.{2 + m.id % 8}"  # like ssh1..ssh8.vast.ai
    m.direct_addr = f"127.1.{m.id // 250 % 250}.{m.id % 250 + 2}"
    m.inet_up_cost = round(rng.uniform(*sc.bandwidth_cost), 4)
    m.inet_down_cost = round(rng.uniform(*sc.bandwidth_cost), 4)
    cities = CITIES.get(m.geolocation)
    if cities:
        m.geolocation = f"{rng.choice(cities)}, {m.geolocation}"
    st = sc.states
    if rng.random() < st.contract_end_share:
        m.contract_end = now() + rng.uniform(*st.contract_end_min) * 60
    else:
        m.contract_end = now() + rng.uniform(3, 90) * 86400
    _host_line(m, sc)
    _gpu_count(m, sc)


def _gpu_count(m: Machine, sc: Scenario) -> None:
    """`[hosts] multi_gpu_share`: a share of machines with 2, 4 or 8 GPUs, rented whole and priced
    per machine as Vast lists `dph_total` (MARKET_EVIDENCE.md)."""
    if sc.hosts.multi_gpu_share <= 0:
        return
    rng = keyed_rng(sc.seed, "gpus", m.id)
    if rng.random() < sc.hosts.multi_gpu_share:
        m.num_gpus = rng.choice((2, 4, 8))
        m.dph_base = round(m.dph_base * m.num_gpus, 4)


def _host_line(m: Machine, sc: Scenario) -> None:
    """`[hosts]`: a bimodal line speed, and a listed reliability that tells the hosts that
    never deliver apart as far as `reliability_signal` says (their own draws)."""
    h = sc.hosts
    if h.inet_fast_share is not None:
        rng = keyed_rng(sc.seed, "line", m.id)
        fast = rng.random() < h.inet_fast_share
        down = rng.uniform(1500, 2600) if fast else rng.uniform(80, 700)
        m.inet_down = round(down, 1)
        m.inet_up = round(down * (rng.uniform(0.8, 1.1) if fast else rng.uniform(0.6, 1.0)), 1)
    if h.reliability_signal is not None:
        rng = keyed_rng(sc.seed, "listed-reliability", m.id)
        s = h.reliability_signal
        told = rng.uniform(0.97, 0.999) if m.behaviour in DELIVERING else rng.uniform(0.80, 0.97)
        m.reliability = round((1 - s) * m.reliability + s * told, 4)


def other_listings(sc: Scenario, now: Callable[[], float]) -> list[Machine]:
    """The listings the CLI's default search leaves out (unverified, external, deverified), on their
    own draws so the verified machines stay as seeded."""
    listing = sc.listing
    unverified, external, deverified = (
        round(sc.offers * share)
        for share in (listing.unverified, listing.external, listing.deverified)
    )
    out = build_machines(sc, now, unverified + external, "listings", range(60000, 99999))
    for i, m in enumerate(out):
        m.verification, m.external = ("unverified", False) if i < unverified else ("verified", True)
    dever = build_machines(sc, now, deverified, "deverified", range(100_000, 160_000))
    for m in dever:
        m.verification = "deverified"
    return out + dever
