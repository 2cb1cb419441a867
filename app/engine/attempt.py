"""One rental attempt as the supervisor holds it: what was rented, where it stands, what it cost so
far; `view()` is the immutable slice the rules decide on. Its fields change only through its
methods, named for what happened, and its lifecycle `life` only in `engine/rentals.py`."""

from __future__ import annotations

import asyncio
import bisect
from dataclasses import dataclass, field, fields
from typing import Any

from ..core.billing import Charges, Mark, charges
from ..core.lifecycle import Lifecycle, Phase
from ..core.models import Offer
from ..core.preflight.verdict import Throttle, Verdict
from ..core.rules import AttemptView

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
    # pending row's id); engine/prices.py writes the new price once that moment has passed
    price_due: tuple[float, float, int] | None = None

    @property
    def passed_preflight(self) -> bool:
        return self.life.proven

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

    # -- what happened to it: the only writers of its fields (tests/test_attempt_writers.py);
    # those an update stands for are called by `engine/rentals.py` alone --
    def mark(self, at: float, kind: str, gpu_dph: float | None = None) -> None:
        """A billing mark (core/billing): a create, stop, start, status change or price."""
        if kind == "create":
            self.marks.append(Mark(at, kind, self.gpu_dph, self.storage_dph))
        elif gpu_dph is not None:
            self.marks.append(Mark(at, kind, gpu_dph=gpu_dph))
        else:
            self.marks.append(Mark(at, kind))

    def marked(self, marks: list[Mark]) -> None:
        """Marks read back from the ledger, in time order as its view reads them (an `unread`
        is dated at the last good read, before the poll that wrote it)."""
        for m in marks:
            bisect.insort(self.marks, m, key=lambda m: m.at)

    def unwritten_off(self) -> None:
        """Listed again after its write-off: the write-off's destroy mark is void."""
        destroy = next((m for m in reversed(self.marks) if m.kind == "destroy"), None)
        if destroy is not None:
            self.marks.remove(destroy)
        self.unseen = 0

    def found(
        self,
        inst_status: str | None,
        msg: str | None,
        host: str | None,
        port: int | None,
        now: float,
    ) -> None:
        """Adopted from the market (engine/recovery.py): where it stands now."""
        self.status, self.status_msg, self.status_since = inst_status, msg, now
        self.ssh_host, self.ssh_port = host, port

    def listed(self) -> None:
        self.unseen = 0

    def left_out(self) -> int:
        """One more poll whose list left it out; how many in a row."""
        self.unseen += 1
        return self.unseen

    def answered_unread(self) -> None:
        self.unseen = 1

    @property
    def unread(self) -> bool:
        """Its row unreadable since its last good read: billed its worst case (an `unread`
        mark, read back from the ledger after a restart too, that no `read` mark closed)."""
        return next((m.kind == "unread" for m in reversed(self.marks) if m.kind in UNREAD), False)

    def row_unread(self) -> float | None:
        """Its row could not be read: billed its worst case from its last good read (its
        create, if none), when that starts; None if it was unread already."""
        if self.unread:
            return None
        since = self.read_at if self.read_at is not None else self.created_at
        bisect.insort(self.marks, Mark(since, "unread"), key=lambda m: m.at)
        return since

    def row_read(self, at: float) -> bool:
        """Its row read well: whether that ends a spell of unreadable rows."""
        self.read_at = at
        if not self.unread:
            return False
        self.marks.append(Mark(at, "read"))
        return True

    def preflight_again(self) -> None:
        """A finished preflight that proved nothing is forgotten: a fresh one once it runs."""
        self.preflight_task, self.verdict = None, None

    def billed_at(self, dph: float) -> None:
        self.dph_seen = max(self.dph_seen, dph)

    def status_seen(self, status: str | None, msg: str | None, now: float) -> None:
        if status != self.status or msg != self.status_msg:
            self.status_since = now
        self.status, self.status_msg = status, msg
        if status != "running":
            self.silent_since = None  # not running by the market's word: no answer is owed

    def routed(self, host: str | None, port: int | None) -> None:
        self.ssh_host, self.ssh_port = host, port

    def came_up(self, now: float) -> None:
        """Its container runs (booted, resumed, adopted running): the idle clock restarts."""
        self.running_at = now
        self.util_low_since = None  # idle readings from before it ran say nothing now
        self.silent_since = None

    def util_seen(self, since: float | None) -> None:
        """Since when its GPU has been idle by the policy (None: busy), from a row or sample."""
        self.util_low_since = since

    def deadlines_from(self, at: float) -> None:
        self.clock_from = at

    def touched(self, at: float, act: str) -> None:
        self.human_at, self.human_act = at, act

    def handed_over(self, now: float) -> None:
        """Supervised from now on: its deadlines, freeze window and idle grace count from now
        (its status line may have stood still for longer while only observed)."""
        self.owned = True
        self.clock_from = self.status_since = now
        if self.running_at is not None:
            self.running_at = now
        if self.util_low_since is not None:
            self.util_low_since = now

    def started(self, at: float) -> None:
        """Our start went through: a stop of ours is undone, and so is the idle time seen before it
        (else the idle rule stops a restarted host again at once)."""
        self.stopped_by_us, self.stop_rule = False, ""
        self.status_since = at
        self.util_low_since = None
        self.silent_since = None

    def stopped_ourselves(self, rule: str = "") -> None:
        """Our stop went through: an explicit stop never resumes by itself."""
        self.stopped_by_us, self.outbid_at, self.resumed = True, None, False
        self.stop_rule = rule

    def restart_refused(self) -> None:
        self.stop_rule = ""

    def verified(self, now: float) -> None:
        if self.verified_at is None:
            self.verified_at = now

    def tended_by(self, task: asyncio.Task[Any]) -> None:
        self.tend_task = task
        self.silent_since = None

    def abandoned_as(self, failure_class: str) -> None:
        self.failure_class = failure_class

    def key_changed(self, why: str) -> bool:
        """Its host key changed after it was pinned: distrusted for good. True the first time."""
        if self.untrusted:
            return False
        self.untrusted = why
        return True

    def job_said(self, line: str) -> None:
        self.job_line = line

    # the preflight's tries (engine/hosts/preflight_run.py)
    def preflight_running(self, task: asyncio.Task[Any]) -> None:
        self.preflight_task = task

    def ssh_waiting(self, why: str) -> None:
        self.ssh_error = why

    def ssh_failed(self, why: str | None = None) -> None:
        self.ssh_failures += 1
        if why is not None:
            self.ssh_error = why

    def ssh_reached(self) -> None:
        self.ssh_error = None

    def probe_answered(self) -> None:
        self.ssh_failures = 0

    def judged(self, verdict: Verdict, doc: dict[str, Any] | None = None) -> None:
        self.verdict = verdict
        if doc is not None:
            self.preflight_doc = doc

    def watchdog_seen(self, armed: bool) -> None:
        self.watchdog_armed = armed

    def sampled(self, rows: list[dict[str, Any]], keep: int = 120) -> None:
        self.samples = (self.samples + rows)[-keep:]

    def throttle_seen(self, t: Throttle) -> None:
        self.throttle = t

    # the interruptible tier (engine/tier.py)
    def outbid(self, now: float, bid_floor: float | None) -> None:
        self.outbid_at, self.resumed = now, False
        self.bid_floor = bid_floor or self.bid_floor

    def bid_floor_seen(self, bid_floor: float) -> None:
        self.bid_floor = bid_floor

    def resumed_itself(self) -> None:
        self.resumed, self.outbid_at = True, None

    def rebid_tried(self) -> None:
        self.rebids += 1

    def rebid_to(self, price: float, at: float) -> None:
        """Its bid changed: a raise remembers the bid it rose from (where a lowering stops,
        `bidding.lower_bid`), and a lowering back to that bid forgets it."""
        if self.bid is not None and price > self.bid and self.raised_from is None:
            self.raised_from = self.bid
        elif self.raised_from is not None and price <= self.raised_from:
            self.raised_from = None
        self.bid = self.gpu_dph = price
        self.billed_at(price)
        self.mark(at, "price", gpu_dph=price)

    def increase_accepted(self, at: float, price: float, pending_id: int) -> None:
        self.price_due = (at, price, pending_id)

    def price_known(self, price: float) -> None:
        """A new GPU price the ledger holds for it (a restart's replay: the mark is made)."""
        self.gpu_dph = price
        self.billed_at(price)

    def repriced(self, at: float, price: float) -> None:
        """A new GPU price in force from `at` (an accepted increase, at its contract's end)."""
        self.price_due = None
        self.gpu_dph = price
        self.billed_at(price)
        self.mark(at, "price", gpu_dph=price)

    def back_in_service(self, now: float) -> None:
        """A resumed bid rental taken back: running from now, not idle yet."""
        self.resumed = False
        self.running_at, self.util_low_since = now, None
        self.silent_since = None

    def bid_held(
        self,
        bid: float,
        bid_floor: float | None,
        ours: bool,
        paused_at: float | None,
        rebid: float | None = None,
    ) -> None:
        """Its bid from the ledger (an adopted bid rental): whether its last stop was ours, since
        when an outbid has paused it, and the bid in force (a raise remembers the create's bid)."""
        self.bid, self.bid_floor, self.stopped_by_us, self.outbid_at = (
            bid,
            bid_floor,
            ours,
            paused_at,
        )
        if rebid is not None:
            self.raised_from = bid if rebid > bid else None
            self.bid = self.gpu_dph = rebid

    def went_silent(self, now: float) -> None:
        """A session to its host got no answer: the host may be offline, which no list can filter
        by, so the poll looks; the rules stop it when the silence lasts. Silence counts only
        while the market says it runs."""
        self.look_wanted = True
        if self.silent_since is None and self.status == "running":
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
