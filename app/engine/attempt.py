"""One rental attempt as the supervisor holds it: what was rented, where it stands, what it cost so
far; `view()` is the immutable slice the rules decide on. Only `engine/rentals.py` writes it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, fields
from typing import Any

from ..core.billing import Charges, Mark, charges
from ..core.decisions import AttemptView
from ..core.lifecycle import Lifecycle, Phase
from ..core.models import Offer
from ..core.preflight.verdict import Throttle, Verdict

# stops for want of work, and an earlier run's own end (its trap, its release): the host was fine
REUSABLE_STOPS = ("rule:drained", "rule:idle", "trap", "rule:campaign_end")
UNREAD = ("unread", "read")  # the billing marks of a spell of unreadable rows


@dataclass
class Attempt:
    instance_id: int
    offer: Offer | None
    machine_id: int | None
    host_id: int | None
    gpu_name: str
    created_at: float
    gpu_dph: float
    storage_dph: float
    life: Lifecycle = field(default_factory=Lifecycle)
    status: str | None = None
    status_msg: str | None = None
    status_since: float = 0.0
    running_at: float | None = None
    preflight_task: asyncio.Task[Any] | None = None
    verdict: Verdict | None = None
    preflight_doc: dict[str, Any] | None = None  # the probe's document, for the detail screen
    ssh_error: str | None = None
    ssh_failures: int = 0  # SSH tries in a row that ended without the host's answer
    ssh_host: str | None = None
    ssh_port: int | None = None
    marks: list[Mark] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    util_low_since: float | None = None
    failure_class: str | None = None
    label: str | None = None
    tend_task: asyncio.Task[Any] | None = None
    # one stop or destroy at a time: the tender (a fatal XID) and the poll's rules may both
    # act on it at once
    acting: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False, compare=False)
    job_line: str = ""  # the running job's last log line, for the dashboard
    watchdog_armed: bool = False
    throttle: Throttle | None = None
    untrusted: str | None = None  # set when its SSH host key changed after it was pinned
    host_fault: tuple[str, str, str] | None = None  # (rule, reason, class): found broken
    market_stop: str | None = None  # why the market stopped it before it was proven
    market_stopped: bool = False  # the market stopped it (proven or not)
    row_gpus: int = 1  # the GPUs the market's row says: an adopted rental has no offer
    look_wanted: bool = False  # its host stopped answering: the next poll asks the market
    silent_since: float | None = None  # since when its host's sessions get no answer
    unseen: int = 0  # consecutive polls the list answer left it out
    dph_seen: float = 0.0  # the highest GPU price the market has shown for it ($/h)
    read_at: float | None = None  # the last poll that read its row well
    # supervised: automation (rules, preflight, watchdog, jobs, release at the end) may act on
    # it. False for what rentwatch did not create (shown, priced, logged; a person acts on it)
    owned: bool = True
    created_by: str | None = None  # the campaign whose create the ledger holds (adopted ones)
    verified_at: float | None = None  # first verified in this campaign's hold of it
    clock_from: float | None = None  # a start resets the boot deadline: it counts from here
    human_at: float | None = None  # the operator's last act on it (market time), and what
    human_act: str = ""
    # the interruptible tier (engine/tier.py): the bid in force ($/h; None: on-demand), the
    # bid_floor last shown, since when an outbid has paused it, whether it resumed by itself,
    # how often its bid was raised and from what bid, and whether its last stop was ours
    # (ours never resumes)
    bid: float | None = None
    bid_floor: float | None = None
    outbid_at: float | None = None
    resumed: bool = False
    rebids: int = 0
    raised_from: float | None = None
    stopped_by_us: bool = False
    stop_rule: str = ""  # the rule (or actor) of our last stop
    # a host's price increase we accepted, not yet in force: (from when, the new GPU $/h, its
    # pending row's id); engine/prices.py puts it in force once that moment has passed
    price_due: tuple[float, float, int] | None = None

    @property
    def passed_preflight(self) -> bool:
        return self.life.proven

    @property
    def slowdown(self) -> float:
        """The share of its speed the throttling seen takes (0: none)."""
        return self.throttle.slowdown if self.throttle and self.throttle.throttled else 0.0

    @property
    def num_gpus(self) -> int:
        """The GPUs its machine is rented with (a bid is the machine's price for all of them)."""
        return self.offer.num_gpus if self.offer is not None else self.row_gpus

    def view(self, busy: bool = False, free_since: float | None = None) -> AttemptView:
        """The rules' slice of it: each field of the view it holds under the same name, the rest
        derived here."""
        same = {f.name: getattr(self, f.name) for f in fields(AttemptView) if hasattr(self, f.name)}
        return AttemptView(
            **same,
            offer_gpu=self.gpu_name,
            phase=self.life.phase,
            preflight_started=self.preflight_task is not None,
            busy=busy,
            free_since=free_since,
            dph=self.gpu_dph + self.storage_dph,
            on_demand_dph=self.offer.gpu_dph if self.offer is not None else self.gpu_dph,
            reusable=self.life.phase == Phase.STOPPED
            and self.passed_preflight
            and self.bid is None
            and self.stop_rule in REUSABLE_STOPS
            and self.host_fault is None
            and not self.untrusted,
        )

    @property
    def resumes_by_itself(self) -> bool:
        """A bid rental the market stopped (an outbid): unless we stop it, it bills again once it
        wins."""
        return self.bid is not None and not self.stopped_by_us

    @property
    def paused(self) -> bool:
        """Stopped by an outbid (or resumed since, not yet back in service), and not by us: its
        disk, and what a job left on it, come back with the resume. Not a contract's end."""
        outbid = self.outbid_at is not None or self.resumed
        return self.life.phase == Phase.STOPPED and self.resumes_by_itself and outbid

    @property
    def unread(self) -> bool:
        """Its row unreadable since its last good read: billed its worst case (an `unread`
        mark, read back from the ledger after a restart too, that no `read` mark closed)."""
        return next((m.kind == "unread" for m in reversed(self.marks) if m.kind in UNREAD), False)

    def charges(self, mode: str, now: float) -> Charges:
        return charges(self.marks, "running" if mode == "running" else "created", now)

    def worst_charges(self, mode: str, now: float) -> float:
        """USD so far as if the highest GPU price ever shown for it applied throughout: what
        the budget counts, so a market that bills above its offer cannot overshoot it."""
        c = self.charges(mode, now)
        if self.dph_seen > self.gpu_dph > 0:
            return c.gpu_usd * self.dph_seen / self.gpu_dph + c.storage_usd
        return c.total_usd
