"""One rental attempt as the supervisor holds it: what was rented, where it stands, what it
cost so far; `view()` is the immutable slice the pure rules decide on.

"Proven" (passed a compute preflight) lives in one place, `life.proven`; `passed_preflight`
reads it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..core.billing import Charges, Mark, charges
from ..core.lifecycle import Lifecycle
from ..core.models import Offer
from ..core.rules import AttemptView
from ..core.verdict import Throttle, Verdict


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
    look_wanted: bool = False  # its host stopped answering: the next poll asks the market
    silent_since: float | None = None  # since when its host's sessions get no answer
    unseen: int = 0  # consecutive polls the list answer left it out
    dph_seen: float = 0.0  # the highest GPU price the market has shown for it ($/h)
    # supervised: automation (rules, preflight, watchdog, jobs, release at the end) may act on
    # it. False for what rentwatch did not create (shown, priced, logged; a person acts on it)
    owned: bool = True
    created_by: str | None = None  # the campaign whose create the ledger holds (adopted ones)
    verified_at: float | None = None  # first verified in this campaign's hold of it
    clock_from: float | None = None  # a start resets the boot deadline: it counts from here
    human_at: float | None = None  # the operator's last act on it (market time), and what
    human_act: str = ""
    # the interruptible tier (engine/tier.py): the bid in force ($/h; None: on-demand), the
    # min_bid last shown, since when an outbid has paused it, whether it resumed by itself,
    # how often its bid was raised, and whether its last stop was ours (ours never resumes)
    bid: float | None = None
    min_bid: float | None = None
    outbid_at: float | None = None
    resumed: bool = False
    rebids: int = 0
    stopped_by_us: bool = False

    @property
    def passed_preflight(self) -> bool:
        return self.life.proven

    def view(self, busy: bool = False, free_since: float | None = None) -> AttemptView:
        return AttemptView(
            instance_id=self.instance_id,
            machine_id=self.machine_id,
            offer_gpu=self.gpu_name,
            phase=self.life.phase,
            status=self.status,
            status_msg=self.status_msg,
            status_since=self.status_since,
            created_at=self.created_at,
            clock_from=self.clock_from,
            running_at=self.running_at,
            passed_preflight=self.passed_preflight,
            preflight_started=self.preflight_task is not None,
            verdict=self.verdict,
            ssh_error=self.ssh_error,
            ssh_failures=self.ssh_failures,
            util_low_since=self.util_low_since,
            throttle=self.throttle,
            untrusted=self.untrusted,
            busy=busy,
            free_since=free_since,
            dph=self.gpu_dph + self.storage_dph,
            host_fault=self.host_fault,
            market_stop=self.market_stop,
            bid=self.bid,
            min_bid=self.min_bid,
            on_demand_dph=self.offer.dph_base if self.offer is not None else self.gpu_dph,
            outbid_at=self.outbid_at,
            resumed=self.resumed,
            rebids=self.rebids,
        )

    @property
    def resumes_by_itself(self) -> bool:
        """A bid rental the market stopped (an outbid): unless we stop it ourselves it runs, and
        bills, again once its bid wins."""
        return self.bid is not None and not self.stopped_by_us

    def went_silent(self, now: float) -> None:
        """A session to its host got no answer: the host may be offline, which the market's
        list cannot be asked for (offline is computed, not stored), so the poll looks; the
        rules stop it when the silence lasts (a host not trusted to stop itself)."""
        self.look_wanted = True
        if self.silent_since is None:
            self.silent_since = now

    def answered(self) -> None:
        self.silent_since = None

    def looked_at(self) -> None:
        self.look_wanted = False

    def left_by_market(self) -> None:
        """The market stopped it (a contract's end, an outbid): no fault of the job's."""
        self.market_stopped = True

    def stopped_by_market(self, why: str) -> None:
        """The market stopped it before it proved itself (a contract's end, a zero balance)."""
        self.market_stop = why

    def found_broken(self, rule: str, reason: str, failure_class: str) -> None:
        """The tender saw this proven host break (a fatal XID): the next poll's rules stop it
        and quarantine its machine."""
        if self.host_fault is None:
            self.host_fault = (rule, reason, failure_class)

    def charges(self, mode: str, now: float) -> Charges:
        return charges(self.marks, "running" if mode == "running" else "created", now)

    def worst_charges(self, mode: str, now: float) -> float:
        """USD so far as if the highest GPU price ever shown for it applied throughout: what
        the budget counts, so a market that bills above its offer cannot overshoot it."""
        c = self.charges(mode, now)
        if self.dph_seen > self.gpu_dph > 0:
            return c.gpu_usd * self.dph_seen / self.gpu_dph + c.storage_usd
        return c.total_usd
