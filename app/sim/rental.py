"""A rental on the simulated market (`SimInstance`): its boots, its stops and what it owes, all read
from the billing marks it leaves (`core/billing.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.billing import Charges, Mark, charges
from .boot import Segment
from .machines import Machine


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
        """When each stop came (the renter's, an outbid, a contract's end)."""
        return [seg.end for seg in self.segments if seg.end is not None]

    @property
    def starts(self) -> list[float]:
        """When each start after the create came."""
        return [seg.start for seg in self.segments[1:]]

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
