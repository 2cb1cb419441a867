"""The market model: machines with fixed behaviours, instances with boot plans, billing truth.

Everything here is driven by an explicit clock (`SimClock`), so the HTTP layer, the SSH hosts
and the tests all see one market time. Randomness is keyed by (seed, machine, rental number),
so the same scenario gives the same market whatever order a client rents it in.

Instance ids never restart across runs, as on the real market: a run's first id comes from the
wall clock at its start (hundredths of a second since 2025, so runs a second apart are 100 ids
apart, and in one process a new market always starts above every id handed out before); the
gaps between a run's ids come from the seed, so within a run they are deterministic.
"""

from __future__ import annotations

import bisect
import hashlib
import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from ..core.billing import Charges, Mark, charges, storage_per_hour
from ..core.gpu_specs import GPU_SPECS
from .images import deny_unpullable
from .scenario import DELIVERING, HostClass, Scenario, States

EPOCH_ORIGIN = float(
    int(time.time())
)  # market time starts at the wall clock; sim time then runs `time_scale` times faster

FATAL_TEXTS = (
    ("loading", "Error response from daemon: manifest for {image} not found: manifest unknown"),
    (
        "loading",
        "pull access denied for {repo}, repository does not exist or may require authorization",
    ),
    ("loading", "unauthorized: authentication required"),
    ("created", "Error: container failed to start: OCI runtime create failed"),
    (
        "created",
        "failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process",
    ),
    ("created", "failed to inject CDI devices: unresolvable CDI devices nvidia.com/gpu=all"),
    ("loading", "unexpected fault address 0x7f3a2c000000"),
)
DRIVER_FOR_CUDA = {
    12.1: "530.41.03",
    12.2: "535.183.01",
    12.4: "550.54.14",
    12.6: "560.35.03",
    12.8: "570.124.04",
}
THROTTLE_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "sw_power_cap", "hw_thermal_slowdown")
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
# Build output an image prints while it loads (apt, Dockerfile steps): ordinary lines that
# mention failures and errors without being fatal (Vast's status line carries them).
BUILD_LINES = (
    "Step 2/7 : RUN apt-get update && apt-get install -y --no-install-recommends git",
    "W: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/jammy-updates/InRelease"
    "  Temporary failure resolving 'archive.ubuntu.com'",
    "W: Some index files failed to download. They have been ignored, or old ones used instead.",
    "Error-prone package versions pinned by the base image; continuing",
    "WARNING: Running pip as the 'root' user can result in broken permissions",
    "Step 5/7 : RUN pip install --no-cache-dir -r requirements.txt",
)
_ID_EPOCH = 1_735_689_600.0  # 2025-01-01T00:00:00Z
_highest_id = 0  # the highest instance id any market in this process handed out


class SimClock:
    """Market time: EPOCH_ORIGIN plus wall time elapsed since start, times the scale."""

    def __init__(self, time_scale: float, origin: float = EPOCH_ORIGIN) -> None:
        self.time_scale = time_scale
        self.origin = origin
        self._mono0 = time.monotonic()
        self._offset = 0.0

    def now(self) -> float:
        return self.origin + self._offset + (time.monotonic() - self._mono0) * self.time_scale

    def advance(self, seconds: float) -> None:
        """Jump the market forward (tests and benchmarks)."""
        self._offset += seconds


def _rng(*key: Any) -> random.Random:
    digest = hashlib.sha256(repr(key).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _between(rng: random.Random, lo_hi: list[float] | tuple[float, float]) -> float:
    lo, hi = lo_hi
    return rng.uniform(lo, hi)


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

    def offer_json(self, allocated_storage: float, now: float | None = None) -> dict[str, Any]:
        spec = GPU_SPECS.get(self.advertised_gpu)
        storage_h = storage_per_hour(allocated_storage, self.storage_cost)
        return {
            "id": self.offer_id,
            "ask_contract_id": self.offer_id,
            "bundle_id": self.offer_id,
            "machine_id": self.id,
            "host_id": self.host_id,
            "gpu_name": self.advertised_gpu,
            "num_gpus": 1,
            "gpu_ram": spec.vram_mb if spec else 24576,
            "gpu_total_ram": spec.vram_mb if spec else 24576,
            "dph_base": round(self.dph_base, 6),
            "dph_total": round(self.dph_base + storage_h, 6),
            "storage_cost": self.storage_cost,
            "storage_total_cost": round(storage_h, 6),
            "disk_space": 500.0,
            "disk_bw": 2000.0,
            "disk_name": "nvme",
            "reliability": self.reliability,
            "reliability2": self.reliability,
            "verification": "verified",
            "verified": True,
            "external": False,
            "rentable": True,
            "rented": False,
            "cuda_max_good": self.cuda_max_good,
            "driver_version": self.driver_version,
            "compute_cap": 860,
            "dlperf": round(
                self.real_tflops / 3
                if self.behaviour == "misreported"
                else (spec.bf16_tflops / 3 if spec else 20.0),
                2,
            ),
            "total_flops": spec.bf16_tflops / 2 if spec else 30.0,
            "dlperf_per_dphtotal": 0.0,
            "inet_up": self.inet_up,
            "inet_down": self.inet_down,
            "inet_up_cost": self.inet_up_cost,
            "inet_down_cost": self.inet_down_cost,
            "geolocation": self.geolocation,
            "score": round(self.reliability * 100 / max(self.dph_base, 0.01), 2),
            "pcie_bw": 12.5,
            "cpu_ghz": 3.6,
            "cpu_cores_effective": 8.0,
            "cpu_ram": 32000,
            "cpu_name": "AMD Ryzen 9 5950X",
            # seconds left on the host's listing (positive, as on the real market)
            "duration": round(max(60.0, self.contract_end - now), 1)
            if self.contract_end is not None and now is not None
            else 30 * 86400.0,
            "direct_port_count": 20 if self.direct else 0,
            "min_bid": round(self.dph_base * 0.6, 6),
            "is_bid": False,
            "start_date": None,
            "end_date": self.contract_end,
            "hosting_type": 0,
        }


@dataclass
class Step:
    at: float
    actual: str | None
    msg: str | None


@dataclass
class Segment:
    """One boot of an instance: from a create or a start until a stop (or for ever)."""

    start: float
    steps: list[Step]
    end: float | None = None
    running_at: float | None = None
    halted_at: float | None = None  # exited / offline on its own
    offline_at: float | None = None  # the host went dark (bills nothing from then)
    throttle_at: float | None = None

    def state_at(self, t: float) -> Step:
        times = [s.at for s in self.steps]
        i = bisect.bisect_right(times, t) - 1
        return self.steps[max(i, 0)]


@dataclass
class SimInstance:
    id: int
    machine: Machine
    image: str
    disk_gb: float
    label: str | None
    env: dict[str, str]
    onstart: str | None
    created_at: float
    gpu_dph: float
    storage_dph: float
    api_key: str
    segments: list[Segment] = field(default_factory=list)
    stops: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    destroyed_at: float | None = None
    ssh_port: int | None = None  # the proxy route's port (on machine.proxy_addr)
    direct_port: int | None = None  # the direct route's port (on machine.direct_addr)
    busy_until: float = 0.0
    market_stop_at: float | None = None  # the market stopped it (contract end), not the renter
    bandwidth: list[Mark] = field(default_factory=list)
    rental_no: int = 0
    throttle_drop: float = 0.0
    throttle_reason: str = ""

    @property
    def intended(self) -> str:
        if self.destroyed_at is not None:
            return "destroyed"
        return "stopped" if self.segments and self.segments[-1].end is not None else "running"

    def status(self, now: float) -> tuple[str | None, str | None]:
        if self.destroyed_at is not None and now >= self.destroyed_at:
            return "destroyed", None
        seg = self.segments[-1]
        if seg.end is not None and now >= seg.end:
            if self.market_stop_at is not None and seg.end == self.market_stop_at:
                return "stopped", "Stopped: the host's rental contract has ended"
            return "stopped", "Stopped by user"
        step = seg.state_at(now)
        return step.actual, step.msg

    def running(self, now: float) -> bool:
        return self.status(now)[0] == "running"

    def marks(self) -> list[Mark]:
        out = [Mark(self.created_at, "create", self.gpu_dph, self.storage_dph)]
        for i, seg in enumerate(self.segments):
            if i > 0:
                out.append(Mark(seg.start, "start"))
            end = seg.end if seg.end is not None else float("inf")
            if self.destroyed_at is not None:
                end = min(end, self.destroyed_at)
            if seg.running_at is not None and seg.running_at < end:
                out.append(Mark(seg.running_at, "running"))
                if seg.halted_at is not None and seg.halted_at < end:
                    out.append(Mark(seg.halted_at, "halt"))
            if seg.offline_at is not None and seg.offline_at < end:
                out.append(Mark(seg.offline_at, "offline"))
            if seg.end is not None and (self.destroyed_at is None or seg.end < self.destroyed_at):
                out.append(Mark(seg.end, "stop"))
        if self.destroyed_at is not None:
            out.append(Mark(self.destroyed_at, "destroy"))
        out.extend(self.bandwidth)
        out.sort(key=lambda m: m.at)
        return out

    def charges(self, now: float, mode: str) -> Charges:
        return charges(self.marks(), "running" if mode == "running" else "created", now)


def nvml_name(model: str) -> str:
    """How NVML spells a model: consumer cards carry "GeForce", the rest only "NVIDIA"."""
    if model.startswith("RTX") and not model.startswith("RTX A"):
        return f"NVIDIA GeForce {model}"
    return f"NVIDIA {model}"


def _layer_id(rng: random.Random) -> str:
    return f"{rng.getrandbits(48):012x}"


def boot_steps(
    rng: random.Random,
    machine: Machine,
    image: str,
    start: float,
    restart: bool = False,
    states: States | None = None,
    extra: random.Random | None = None,
) -> Segment:
    """The status lines an instance shows from `start`, as its machine's behaviour dictates.

    `states` adds the market's unkindness (a `scheduling` wait, a state no list names, build
    output while loading), drawn from `extra` so the behaviour's own timings stay as seeded."""
    k = machine.knobs
    b = machine.behaviour
    st = states or States(0.0, 0.0, "provisioning", 0.0)
    ex = extra or random.Random(0)
    scheduling = ex.random() < st.scheduling_share
    unnamed = ex.random() < st.unnamed_share
    build = ex.random() < st.build_output_share
    steps: list[Step] = [Step(start, None, None)]
    queue = _between(rng, k["queue_min"]) * 60
    if scheduling:  # the queue wait shows as Vast's `scheduling` (waiting for its GPU)
        steps.append(Step(start + min(2.0, queue / 4), "scheduling", "Waiting for GPU"))
    t = start + queue
    seg = Segment(start=start, steps=steps)
    if restart:
        if b == "offline_midrun":
            steps.append(Step(t, "offline", None))
            seg.offline_at = t
            return seg
        steps.append(Step(t, "loading", "Starting container"))
        t += _between(rng, k["start_min"]) * 60
    else:
        steps.append(Step(t, "created", "Creating container"))
        t += rng.uniform(3, 12)
        if unnamed:  # a lifecycle state rentwatch has no name for
            steps.append(Step(t, st.unnamed_name, "Preparing container"))
            t += ex.uniform(20, 90)
        if b == "fatal_pull":
            fatal_at = t + _between(rng, k["fatal_at_min"]) * 60
        else:
            fatal_at = None
        pull = _between(rng, k["pull_min"]) * 60
        freeze_at = t + pull * _between(rng, k["freeze_at"]) if b == "freeze_pull" else None
        layers = [(_layer_id(rng), rng.uniform(5, 1800)) for _ in range(rng.randint(5, 9))]
        total_mb = sum(mb for _, mb in layers)
        for lid, _ in layers:
            steps.append(Step(t, "loading", f"{lid}: Pulling fs layer"))
            t += rng.uniform(0.5, 2)
        for lid, mb in layers:
            layer_time = pull * mb / total_mb
            t_end = t + layer_time
            while t < t_end:
                if freeze_at is not None and t >= freeze_at:
                    return seg  # the line never changes again
                if fatal_at is not None and t >= fatal_at:
                    actual, text = FATAL_TEXTS[rng.randrange(len(FATAL_TEXTS))]
                    repo = image.split(":")[0]
                    steps.append(Step(t, actual, text.format(image=image, repo=repo)))
                    return seg
                done = max(0.0, mb * (1 - (t_end - t) / max(layer_time, 1e-9)))  # never -0.0
                steps.append(Step(t, "loading", f"{lid}: Downloading {done:7.1f}MB/{mb:.1f}MB"))
                t += rng.uniform(3, 15)
            t = t_end
            steps.append(Step(t, "loading", f"{lid}: Download complete"))
            t += rng.uniform(0.2, 1.5)
        if fatal_at is not None:
            actual, text = FATAL_TEXTS[rng.randrange(len(FATAL_TEXTS))]
            steps.append(Step(t, actual, text.format(image=image, repo=image.split(":")[0])))
            return seg
        # Extraction: the line legitimately stays unchanged for minutes on healthy hosts.
        steps.append(
            Step(
                t,
                "loading",
                f"{layers[-1][0]}: Extracting {layers[-1][1]:.1f}MB/{layers[-1][1]:.1f}MB",
            )
        )
        extract = _between(rng, k["extract_min"]) * 60
        if build:  # the image's build output shows in the status line while it loads
            first = ex.randrange(len(BUILD_LINES) - 2)
            for i, line in enumerate(BUILD_LINES[first : first + 3]):
                steps.append(Step(t + extract * (0.3 + 0.2 * i), "loading", line))
        t += extract
        steps.append(Step(t, "loading", f"Status: Downloaded newer image for {image}"))
        t += rng.uniform(2, 8)
        steps.append(Step(t, "loading", "Starting container"))
        t += _between(rng, k["start_min"]) * 60
    steps.append(Step(t, "running", f"success, running {image}/ssh"))
    seg.running_at = t
    if b == "exited":
        t_exit = t + _between(rng, k["exit_after_min"]) * 60
        steps.append(
            Step(
                t_exit,
                "exited",
                f"Exited ({rng.choice([1, 137, 139])}) container exited unexpectedly",
            )
        )
        seg.halted_at = t_exit
    elif b == "offline_midrun":
        t_off = t + _between(rng, k["offline_after_min"]) * 60
        steps.append(Step(t_off, "offline", None))
        seg.halted_at = t_off
        seg.offline_at = t_off
    elif b == "throttled":
        seg.throttle_at = t + _between(rng, k["throttle_after_min"]) * 60
    return seg


class Market:
    """All of the simulated marketplace's state, behind methods the HTTP layer calls."""

    def __init__(
        self,
        scenario: Scenario,
        clock: SimClock | None = None,
        api_key: str | None = None,
        id_base: int | None = None,
    ) -> None:
        self.scenario = scenario
        self.clock = clock or SimClock(scenario.time_scale)
        self.api_key = api_key or secrets.token_hex(16)
        self.machines: list[Machine] = self._build_machines()
        self.by_offer = {m.offer_id: m for m in self.machines}
        self.instances: dict[int, SimInstance] = {}
        self.order: list[int] = []  # instance ids in creation order, which is id order
        self._live = 0
        self.ssh_keys: list[dict[str, Any]] = []
        self._next_instance = self._first_id(id_base)
        self._instance_keys: dict[str, int] = {}
        self._preload()

    def _first_id(self, id_base: int | None) -> int:
        """Where this run's instance ids start (see the module's docstring)."""
        global _highest_id
        if id_base is None:
            id_base = 10_000_000 + int((time.time() - _ID_EPOCH) * 100)
            id_base = max(id_base, _highest_id + 1)
        return id_base + _rng(self.scenario.seed, "ids").randrange(0, 10)

    # -- machines and offers ------------------------------------------------------------
    def _build_machines(self) -> list[Machine]:
        sc = self.scenario
        rng = _rng(sc.seed, "market")
        shares = sc.shares()
        n = sc.offers
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
        machine_ids = rng.sample(range(1000, 60000), n)
        host_ids = rng.sample(range(10000, 99999), max(1, n * 2 // 3))
        countries = ["US", "CA", "DE", "PL", "SE", "FR", "GB", "JP", "BR", "VN", "RO", "ES"]
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
                    tflops *= _between(rng, hc.knobs["misreport_speed"])
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
                    host_id=host_ids[i % len(host_ids)]
                    if rng.random() < 0.5
                    else rng.choice(host_ids),
                    offer_id=2_000_000 + machine_ids[i] * 10 + rng.randrange(10),
                    behaviour=behaviour,
                    advertised_gpu=gpu,
                    real_gpu=real_gpu,
                    real_tflops=tflops,
                    dph_base=round(_between(rng, hc.price_range(gpu)), 4),
                    storage_cost=round(_between(rng, sc.storage_cost), 4),
                    cuda_max_good=cuda,
                    driver_version=driver,
                    reliability=reliability,
                    geolocation=rng.choice(countries),
                    inet_up=round(rng.uniform(50, 900), 1),
                    inet_down=round(rng.uniform(100, 1500), 1),
                    knobs=hc.knobs,
                )
            )
        for m in machines:
            self._unkind(m)
        return machines

    def _unkind(self, m: Machine) -> None:
        """Routes, bandwidth prices, the city and the listing's end: drawn apart from the
        behaviour's own draws, so adding them left every seeded market as it was."""
        sc = self.scenario
        rng = _rng(sc.seed, "unkind", m.id)
        m.direct = rng.random() < sc.ssh.direct_share
        m.proxy_addr = f"127.0.0.{2 + m.id % 8}"  # like ssh1..ssh8.vast.ai
        m.direct_addr = f"127.1.{m.id // 250 % 250}.{m.id % 250 + 2}"
        m.inet_up_cost = round(_between(rng, sc.bandwidth_cost), 4)
        m.inet_down_cost = round(_between(rng, sc.bandwidth_cost), 4)
        cities = CITIES.get(m.geolocation)
        if cities:
            m.geolocation = f"{rng.choice(cities)}, {m.geolocation}"
        st = sc.states
        if rng.random() < st.contract_end_share:
            m.contract_end = self.clock.now() + _between(rng, st.contract_end_min) * 60
        else:
            m.contract_end = self.clock.now() + rng.uniform(3, 90) * 86400

    def rented_machines(self) -> set[int]:
        return {i.machine.id for i in self.instances.values() if i.destroyed_at is None}

    def offers(self) -> list[Machine]:
        busy = self.rented_machines()
        return [m for m in self.machines if m.id not in busy]

    # -- instances ------------------------------------------------------------------------
    def create(
        self,
        offer_id: int,
        image: str,
        disk_gb: float,
        label: str | None,
        env: dict[str, str],
        onstart: str | None,
        at: float | None = None,
    ) -> SimInstance:
        global _highest_id
        m = self.by_offer[offer_id]
        now = self.clock.now() if at is None else at
        m.rentals += 1
        iid = self._next_instance
        self._next_instance += 1 + _rng(self.scenario.seed, "gap", m.id, m.rentals).randrange(0, 3)
        _highest_id = max(_highest_id, iid)
        rng = _rng(self.scenario.seed, m.id, m.rentals)
        inst = SimInstance(
            id=iid,
            machine=m,
            image=image,
            disk_gb=disk_gb,
            label=label,
            env=env,
            onstart=onstart,
            created_at=now,
            gpu_dph=m.dph_base,
            storage_dph=storage_per_hour(disk_gb, m.storage_cost),
            api_key=secrets.token_hex(24),
            rental_no=m.rentals,
        )
        extra = _rng(self.scenario.seed, "states", m.id, m.rentals)
        seg = boot_steps(rng, m, image, now, False, self.scenario.states, extra)
        inst.segments.append(deny_unpullable(seg, image, self.scenario.images))
        inst.throttle_drop = _between(rng, m.knobs["throttle_drop"])
        inst.throttle_reason = rng.choice(THROTTLE_REASONS)
        self.instances[iid] = inst
        self.order.append(iid)
        self._live += 1
        self._instance_keys[inst.api_key] = iid
        return inst

    def _preload(self) -> None:
        """The fleet the scenario says the account already rents (see `Scenario.preload`)."""
        n, booting = self.scenario.preload, self.scenario.preload_booting
        now = self.clock.now()
        for i, m in enumerate(self.machines[:n]):
            at = now if i >= n - booting else now - 3600.0
            label = f"{self.scenario.preload_label}:{i}"
            self.create(m.offer_id, "preload", 10.0, label, {}, None, at=at)

    def live_count(self) -> int:
        return self._live

    def instance_for_key(self, key: str) -> int | None:
        return self._instance_keys.get(key)

    def live(self, iid: int) -> SimInstance | None:
        inst = self.instances.get(iid)
        if inst is None or inst.destroyed_at is not None:
            return None
        return inst

    def stop(self, inst: SimInstance) -> None:
        seg = inst.segments[-1]
        if seg.end is None:
            now = self.clock.now()
            seg.end = now
            inst.stops.append(now)

    def start(self, inst: SimInstance) -> None:
        seg = inst.segments[-1]
        if seg.end is None:
            return
        now = self.clock.now()
        inst.starts.append(now)
        rng = _rng(self.scenario.seed, inst.machine.id, inst.rental_no, "start", len(inst.segments))
        extra = _rng(
            self.scenario.seed, "states", inst.machine.id, inst.rental_no, len(inst.segments)
        )
        pulled = any(s.running_at is not None for s in inst.segments)
        seg = boot_steps(rng, inst.machine, inst.image, now, pulled, self.scenario.states, extra)
        inst.segments.append(deny_unpullable(seg, inst.image, self.scenario.images))

    def contract_over(self, inst: SimInstance, now: float | None = None) -> bool:
        end = inst.machine.contract_end
        return end is not None and (self.clock.now() if now is None else now) >= end

    def market_stops(self, now: float) -> None:
        """Stop, as of the listing's end, every rental whose host's contract has ended: the
        market's own stop (Vast stops, it does not destroy, at a contract's end date)."""
        for inst in self.instances.values():
            end = inst.machine.contract_end
            if inst.destroyed_at is not None or end is None or now < end:
                continue
            seg = inst.segments[-1]
            if seg.end is None and seg.start < end:
                seg.end = end
                inst.stops.append(end)
                inst.market_stop_at = end

    def bill_bytes(self, inst: SimInstance, down: int, up: int) -> None:
        """Bytes moved in a session: the renter's download is the host's upload."""
        m = inst.machine
        usd = (up * m.inet_down_cost + down * m.inet_up_cost) / 1e9
        if usd > 0 and inst.destroyed_at is None:
            inst.bandwidth.append(Mark(self.clock.now(), "bandwidth", usd=usd))

    def destroy(self, inst: SimInstance) -> None:
        if inst.destroyed_at is None:
            inst.destroyed_at = self.clock.now()
            self._live -= 1
            self._instance_keys.pop(inst.api_key, None)

    # -- what the GPU would say -----------------------------------------------------------
    def gpu_state(self, inst: SimInstance, now: float) -> dict[str, Any]:
        """The facts the on-host probes read, for this instance's machine at `now`."""
        m = inst.machine
        seg = inst.segments[-1]
        throttled = seg.throttle_at is not None and now >= seg.throttle_at
        spec = GPU_SPECS.get(m.real_gpu)
        busy = now < inst.busy_until
        return {
            "name": nvml_name(m.real_gpu),
            "driver_version": m.driver_version,
            "cuda_version": str(m.cuda_max_good),
            "cuda_works": m.behaviour != "stale_driver",
            "tflops": m.real_tflops * (1 - inst.throttle_drop if throttled else 1.0),
            "vram_mb": spec.vram_mb if spec else 24576,
            "max_sm_clock": 1950,
            "sm_clock": int(1950 * (1 - inst.throttle_drop))
            if throttled
            else (1950 if busy else 210),
            "throttle_reasons": [inst.throttle_reason]
            if throttled
            else ([] if busy else ["gpu_idle"]),
            "util": 97 if busy else 0,
            "temp": 83 if throttled else (71 if busy else 38),
            "power_w": 310.0 if busy else 22.0,
            "power_limit_w": 350.0,
        }

    # -- truth ----------------------------------------------------------------------------
    def truth(self) -> dict[str, Any]:
        now = self.clock.now()
        self.market_stops(now)
        rows = []
        tot_gpu = tot_storage = tot_bw = 0.0
        for inst in self.instances.values():
            c = inst.charges(now, self.scenario.gpu_billing)
            running_at = next(
                (
                    s.running_at
                    for s in inst.segments
                    if s.running_at is not None and s.running_at <= now
                ),
                None,
            )
            actual, _ = inst.status(now)
            dropped = [
                s.offline_at
                for s in inst.segments
                if s.offline_at is not None and s.offline_at <= now
            ]
            rows.append(
                {
                    "id": inst.id,
                    "machine_id": inst.machine.id,
                    "host_id": inst.machine.host_id,
                    "offer_id": inst.machine.offer_id,
                    "behaviour": inst.machine.behaviour,
                    "delivering": inst.machine.behaviour in DELIVERING,
                    "gpu_name": inst.machine.advertised_gpu,
                    "real_gpu": inst.machine.real_gpu,
                    "actual_status": actual,
                    "created_at": inst.created_at,
                    "running_at": running_at,
                    "stopped_at": inst.stops[-1]
                    if inst.stops and inst.intended == "stopped"
                    else None,
                    "destroyed_at": inst.destroyed_at,
                    "offline_at": dropped[0] if dropped else None,  # the host went dark
                    "gpu_dph": inst.gpu_dph,
                    "storage_dph": inst.storage_dph,
                    "gpu_usd": round(c.gpu_usd, 6),
                    "storage_usd": round(c.storage_usd, 6),
                    "bandwidth_usd": round(c.bandwidth_usd, 6),
                    "total_usd": round(c.total_usd, 6),
                    "direct_ssh": inst.machine.direct,
                    "market_stopped_at": inst.market_stop_at,
                }
            )
            tot_gpu += c.gpu_usd
            tot_storage += c.storage_usd
            tot_bw += c.bandwidth_usd
        return {
            "now": now,
            "scenario": self.scenario.name,
            "seed": self.scenario.seed,
            "gpu_billing": self.scenario.gpu_billing,
            "instances": rows,
            "totals": {
                "gpu_usd": round(tot_gpu, 6),
                "storage_usd": round(tot_storage, 6),
                "bandwidth_usd": round(tot_bw, 6),
                "total_usd": round(tot_gpu + tot_storage + tot_bw, 6),
            },
        }
