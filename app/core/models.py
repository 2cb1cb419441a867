"""The marketplace's offers and rentals in rentwatch's own words: what every market's client
hands the engine (each market parses its own answers into these, defensively: a row is
evidence, not truth, DESIGN rule 9)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    """Where a rental is in its life, as the engine reads it. A market's client maps its own
    words onto these; a word it does not know reads as `UNKNOWN`, which is not fatal by
    itself (deadlines decide)."""

    SCHEDULING = "scheduling"  # waiting for its GPU, possibly for long
    CREATED = "created"
    LOADING = "loading"
    RUNNING = "running"
    STOPPED = "stopped"
    FROZEN = "frozen"
    EXITED = "exited"
    REBOOTING = "rebooting"
    UNKNOWN = "unknown"
    OFFLINE = "offline"


KNOWN_STATUSES = frozenset(s.value for s in Status)
# what the intended, current and next state say when the rental is (to be) stopped
STOPPED_STATES = frozenset({"stopped", "offline"})


@dataclass(frozen=True, slots=True)
class Offer:
    id: int
    machine_id: int
    host_id: int | None
    gpu_name: str
    num_gpus: int
    dph_total: float
    gpu_dph: float
    storage_cost: float  # $/GB/month
    cuda_max_good: float | None
    reliability: float | None
    driver_version: str | None
    gpu_ram_mb: float | None
    geolocation: str | None
    dlperf: float | None = None
    disk_bw: float | None = None  # MB/s the host claims for its disk (the preflight checks it)
    inet_down: float | None = None  # Mb/s the host claims for downloads (likewise)
    inet_up_cost: float = 0.0  # $/GB moved out of the host (Vast bills bandwidth per byte)
    inet_down_cost: float = 0.0  # $/GB moved into it
    # the bid to beat now on the interruptible tier, $/h; None where the market gave none
    bid_floor: float | None = None
    # "open ports on host's router" (the CLI's `search offers` fields): 0 is a host reached
    # through the market's SSH proxy only, which a copy between instances cannot come off
    direct_port_count: int | None = None


@dataclass(frozen=True, slots=True)
class SSHRoute:
    """One way into an instance: `kind` is "direct" (the host's own public address and the port
    its 22/tcp is mapped to) or "proxy" (the market's SSH relay and its port). A host and a
    port always come from the same route; mixing them names a machine that does not exist."""

    kind: str
    host: str | None
    port: int


@dataclass(frozen=True, slots=True)
class Instance:
    id: int
    machine_id: int | None
    host_id: int | None
    label: str | None
    status: str | None  # None while provisioning
    target_state: str | None
    status_msg: str | None
    start_date: float | None
    gpu_name: str | None
    num_gpus: int
    gpu_dph: float
    dph_total: float
    storage_total_cost: float  # $/h for the disk
    gpu_util: float | None
    ssh_host: str | None  # the preferred route's host and port (see `ssh_routes`)
    ssh_port: int | None
    image: str | None
    current_state: str | None = None
    next_state: str | None = None
    ssh_routes: tuple[SSHRoute, ...] = ()
    uptime_mins: float | None = None  # how long the container has run (None: not running)
    # the interruptible tier: the bid to beat now ($/h) and the host's contract end
    bid_floor: float | None = None
    end_date: float | None = None
    # the rental's type: a bid (interruptible) rental or not; None where the row does not say
    interruptible: bool | None = None

    @property
    def known_status(self) -> Status | None:
        s = self.status
        if s is None:
            return None
        s = s.lower()
        return Status(s) if s in KNOWN_STATUSES else Status.UNKNOWN

    @property
    def market_stopped(self) -> bool:
        """The market means this instance to be stopped: its intended, current and next state
        all say so (dstack's `vastai/compute.py` reads the same three). A stop rentwatch did
        not ask for is then the market's own: a contract's end date or a zero balance."""
        states = (self.target_state, self.current_state, self.next_state)
        said = [s.lower() for s in states if s]
        return bool(said) and all(s in STOPPED_STATES for s in said)
