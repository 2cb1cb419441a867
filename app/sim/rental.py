"""A rental on the simulated market (`SimInstance`): its boots, each a `Segment` of the status
`Step`s its machine's behaviour dictates, its stops, and what it owes, read from the billing marks
it leaves (`core/billing.py`)."""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from typing import Any

from ..core.billing import Charges, Mark, charges
from .machines import Machine
from .scenario import States

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
BUILD_LINES = (
    "Step 2/7 : RUN apt-get update && apt-get install -y --no-install-recommends git",
    "W: Failed to fetch http://archive.ubuntu.com/ubuntu/dists/jammy-updates/InRelease"
    "  Temporary failure resolving 'archive.ubuntu.com'",
    "W: Some index files failed to download. They have been ignored, or old ones used instead.",
    "Error-prone package versions pinned by the base image; continuing",
    "WARNING: Running pip as the 'root' user can result in broken permissions",
    "Step 5/7 : RUN pip install --no-cache-dir -r requirements.txt",
)

THROTTLE_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "sw_power_cap", "hw_thermal_slowdown")
# What a create's boot takes besides its knobs, at the least `boot_steps` draws: the created
# line (3 s), five layers (0.5 s to list each, 0.2 s after each download) and the image's
# "Downloaded newer image" line (2 s)
BOOT_LEAST_FIXED_S = 3.0 + 5 * (0.5 + 0.2) + 2.0


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
    stopped_inside: bool = False  # its stop was asked with the container's own key

    def state_at(self, t: float) -> Step:
        i = bisect.bisect_right(self.steps, t, key=lambda s: s.at) - 1
        return self.steps[max(i, 0)]


def _fatal(rng: random.Random, image: str, t: float) -> Step:
    actual, text = FATAL_TEXTS[rng.randrange(len(FATAL_TEXTS))]
    return Step(t, actual, text.format(image=image, repo=image.split(":")[0]))


def boot_steps(
    rng: random.Random,
    machine: Machine,
    image: str,
    start: float,
    restart: bool,
    states: States,
    extra: random.Random,
    pullable: bool,
) -> Segment:
    """The status lines an instance shows from `start`, as its machine's behaviour dictates;
    `states` adds the market's unkindness, drawn from `extra` so the behaviour's timings stay.
    An image the registry refuses (`pullable` false) fails as its pull starts, on every host."""
    k = machine.knobs
    b = machine.behaviour
    scheduling = extra.random() < states.scheduling_share
    unnamed = extra.random() < states.unnamed_share
    build = extra.random() < states.build_output_share
    steps: list[Step] = [Step(start, None, None)]
    queue = rng.uniform(*k["queue_min"]) * 60
    if restart:  # a start waits for its GPU in `scheduling` (vast-ai/docs manage-instances)
        steps[0] = Step(start, "scheduling", "Waiting for GPU")
    elif scheduling:  # the queue wait shows as Vast's `scheduling` (waiting for its GPU)
        steps.append(Step(start + min(2.0, queue / 4), "scheduling", "Waiting for GPU"))
    t = start + queue
    seg = Segment(start=start, steps=steps)
    if restart:
        if b == "offline_midrun":
            steps.append(Step(t, "offline", None))
            seg.offline_at = t
            return seg
        steps.append(Step(t, "loading", "Starting container"))
        t += rng.uniform(*k["start_min"]) * 60
    else:
        steps.append(Step(t, "created", "Creating container"))
        t += rng.uniform(3, 12)
        if unnamed:  # a lifecycle state rentwatch has no name for
            steps.append(Step(t, states.unnamed_name, "Preparing container"))
            t += extra.uniform(20, 90)
        if not pullable:
            steps.append(Step(steps[-1].at + 2.0, "loading", denial_line(image)))
            return seg
        fatal_at = t + rng.uniform(*k["fatal_at_min"]) * 60 if b == "fatal_pull" else None
        pull = rng.uniform(*k["pull_min"]) * 60
        freeze_at = t + pull * rng.uniform(*k["freeze_at"]) if b == "freeze_pull" else None
        layers = [
            (f"{rng.getrandbits(48):012x}", rng.uniform(5, 1800)) for _ in range(rng.randint(5, 9))
        ]
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
                    steps.append(_fatal(rng, image, t))
                    return seg
                done = max(0.0, mb * (1 - (t_end - t) / max(layer_time, 1e-9)))  # never -0.0
                steps.append(Step(t, "loading", f"{lid}: Downloading {done:7.1f}MB/{mb:.1f}MB"))
                t += rng.uniform(3, 15)
            t = t_end
            steps.append(Step(t, "loading", f"{lid}: Download complete"))
            t += rng.uniform(0.2, 1.5)
        if fatal_at is not None:
            steps.append(_fatal(rng, image, t))
            return seg
        # Extraction: the line legitimately stays unchanged for minutes on healthy hosts.
        lid, mb = layers[-1]
        steps.append(Step(t, "loading", f"{lid}: Extracting {mb:.1f}MB/{mb:.1f}MB"))
        extract = rng.uniform(*k["extract_min"]) * 60
        if build:  # the image's build output shows in the status line while it loads
            first = extra.randrange(len(BUILD_LINES) - 2)
            for i, line in enumerate(BUILD_LINES[first : first + 3]):
                steps.append(Step(t + extract * (0.3 + 0.2 * i), "loading", line))
        t += extract
        steps.append(Step(t, "loading", f"Status: Downloaded newer image for {image}"))
        t += rng.uniform(2, 8)
        steps.append(Step(t, "loading", "Starting container"))
        t += rng.uniform(*k["start_min"]) * 60
    steps.append(Step(t, "running", f"success, running {image}/ssh"))
    seg.running_at = t
    if b == "exited":
        t_exit = t + rng.uniform(*k["exit_after_min"]) * 60
        said = f"Exited ({rng.choice([1, 137, 139])}) container exited unexpectedly"
        steps.append(Step(t_exit, "exited", said))
        seg.halted_at = t_exit
    elif b == "offline_midrun":
        t_off = t + rng.uniform(*k["offline_after_min"]) * 60
        steps.append(Step(t_off, "offline", None))
        seg.halted_at = t_off
        seg.offline_at = t_off
    elif b == "throttled":
        seg.throttle_at = t + rng.uniform(*k["throttle_after_min"]) * 60
    return seg


def least_boot_s(knobs: dict[str, Any]) -> float:
    """The least market seconds a create takes to reach `running` on a machine with these knobs (the
    referee's floor: app/referee/floor.py)."""
    lows = sum(float(knobs[k][0]) for k in ("queue_min", "pull_min", "extract_min", "start_min"))
    return 60.0 * lows + BOOT_LEAST_FIXED_S


def denial_line(image: str) -> str:
    """What the Docker daemon prints when the registry refuses an image."""
    repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    return (
        f"Error response from daemon: pull access denied for {repo}, repository does not "
        "exist or may require 'docker login': denied: requested access to the resource is denied"
    )


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
    # each GPU $/h it billed from, (at, price): the create's, then each change of its bid, each
    # clearing price and each accepted price increase
    prices: list[tuple[float, float]]
    storage_dph: float
    api_key: str
    segments: list[Segment] = field(default_factory=list)  # each boot; a stop ends one
    destroyed_at: float | None = None
    ssh_port: int | None = None  # the proxy route's port (on machine.proxy_addr)
    direct_port: int | None = None  # the direct route's port (on machine.direct_addr)
    busy_until: float = 0.0
    market_stop_at: float | None = None  # the market stopped it (contract end), not the renter
    # each transfer's price by direction, as the market's charges split it: (at, USD of bytes
    # into the instance (`bwd`), USD of bytes out of it (`bwu`))
    transfers: list[tuple[float, float, float]] = field(default_factory=list)
    rental_no: int = 0
    throttle_drop: float = 0.0
    throttle_reason: str = ""
    # the public keys its SSH accepts: the account's at the create, and those attached to it
    # since (Vast: account keys reach new instances only; vast-ai/docs connect/ssh.mdx)
    ssh_keys: list[str] = field(default_factory=list)
    # paused with its memory kept (`frozen`: "GPU charges apply", vast-ai/docs
    # cli/reference/show-instance.mdx): it bills as running does
    frozen_at: float | None = None
    expired_at: float | None = None  # the market deleted it 48 h after its contract ended
    # the interruptible tier (app/sim/bids.py): the bid ($/h, None: on-demand), the outbid pause
    # it is in (since when; it resumes by itself), every outbid and resume, and how far it was
    # settled
    bid: float | None = None
    paused_at: float | None = None
    outbids: list[float] = field(default_factory=list)
    lost_bids: list[float] = field(default_factory=list)  # a start or create whose bid lost
    resumes: list[float] = field(default_factory=list)
    bid_seen: float = 0.0
    offer_id: int | None = None  # the listing rented (`[churn]`: a machine's id changes)

    @property
    def gpu_dph(self) -> float:
        """The GPU's $/h now (a bid rental's: what its bid pays)."""
        return self.prices[-1][1]

    @property
    def stops(self) -> list[float]:
        return [seg.end for seg in self.segments if seg.end is not None]

    @property
    def intended(self) -> str:
        if self.destroyed_at is not None:
            return "destroyed"
        if self.frozen_at is not None:
            return "frozen"
        # an outbid rental reads stopped in intended, current and next state alike (dstack
        # `vastai/compute.py` update_provisioning_data: "when a spot instance is outbid")
        return "stopped" if self.segments and self.segments[-1].end is not None else "running"

    def status(self, now: float) -> tuple[str | None, str | None]:
        if self.destroyed_at is not None and now >= self.destroyed_at:
            return "destroyed", None
        seg = self.segments[-1]
        if seg.end is not None and now >= seg.end:
            if self.market_stop_at is not None and seg.end == self.market_stop_at:
                return "stopped", "Stopped: the host's rental contract has ended"
            if self.paused_at is not None:
                # the simulator's own words: no source gives Vast's text for an outbid
                return "stopped", "Stopped: outbid; resumes when its bid regains priority"
            return "stopped", "Stopped by user"
        step = seg.state_at(now)
        if self.frozen_at is not None and step.actual == "running":
            return "frozen", "Paused with memory preserved"
        return step.actual, step.msg

    def running(self, now: float) -> bool:
        return self.status(now)[0] == "running"

    def marks(self) -> list[Mark]:
        out = [Mark(self.created_at, "create", self.prices[0][1], self.storage_dph)]
        # a bid rental bills its GPU at the bid in force (a change of bid: a new price)
        out.extend(Mark(at, "price", gpu_dph=p) for at, p in self.prices[1:])
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
        out.extend(Mark(at, "bandwidth", usd=into + o) for at, into, o in self.transfers)
        out.sort(key=lambda m: m.at)
        return out

    def charges(self, now: float, mode: str) -> Charges:
        return charges(self.marks(), "running" if mode == "running" else "created", now)
