"""The rules' vocabulary: the fleet snapshot they decide on and the decisions they return. Pure.
`Abandon` (destroy and quarantine) can only be built for an attempt that never passed its
preflight; for everything else the strongest automated act is `Stop`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

from .blame.fault import BlameView
from .delivery import WorkOutlook
from .lifecycle import Phase
from .models import Offer
from .offers.choice import Exclusions, History, OfferTerms, Quarantine
from .offers.track_record import Memory
from .preflight.verdict import Throttle, Verdict

if TYPE_CHECKING:
    from .bidding.rules import BidTerms
    from .worth.swap import Slow


@dataclass(frozen=True)
class AttemptView:
    instance_id: int
    machine_id: int | None
    offer_gpu: str
    phase: Phase
    status: str | None
    status_msg: str | None
    status_since: float  # when the status line last changed (market time)
    created_at: float
    running_at: float | None = None
    passed_preflight: bool = False
    preflight_started: bool = False
    verdict: Verdict | None = None
    ssh_error: str | None = None
    ssh_failures: int = 0  # SSH tries in a row that ended without the host's answer
    util_low_since: float | None = None
    throttle: Throttle | None = None
    busy: bool = False  # a job runs on it, or its artifacts are coming off
    free_since: float | None = None  # no job on it since (its last job's end, or its verify)
    untrusted: str | None = None  # why the host is no longer trusted (its SSH host key changed)
    dph: float = 0.0  # what it bills per hour at most (GPU and storage), for the budget
    clock_from: float | None = None  # its last start: deadlines count from here, not the create
    # (rule, reason, failure class): a proven host the tender found broken (a fatal XID)
    host_fault: tuple[str, str, str] | None = None
    market_stop: str | None = None  # why the market stopped it before it was proven
    silent_since: float | None = None  # since when its host's sessions get no answer
    # the interruptible tier (bid_rules.py): its bid ($/h; None: on-demand), the bid_floor the
    # market last showed, the same machine's on-demand price, since when it has been paused
    # by an outbid (None: not paused), whether it runs again by itself after one (a resume
    # nobody has taken back into service yet) and how often its bid was raised
    bid: float | None = None
    bid_floor: float | None = None
    on_demand_dph: float = 0.0
    outbid_at: float | None = None
    resumed: bool = False
    rebids: int = 0
    raised_from: float | None = None  # the bid before a rebid raised it (None: not raised)
    # stopped by us for want of work (rule:drained, rule:idle): proven, nothing wrong with it
    reusable: bool = False

    @property
    def boot_clock(self) -> float:
        """When its boot deadline started: the create, or the start that booted it again."""
        return self.created_at if self.clock_from is None else self.clock_from


@dataclass(frozen=True)
class FleetSnapshot:
    fleet: int
    max_creates: int
    creates: int
    budget_usd: float
    spent_usd: float
    attempts: tuple[AttemptView, ...]
    deadline: float | None = None
    jobs_pending: int = 0
    jobs_total: int = 0
    jobs_running: int = 0
    jobs_failed: int = 0
    offers_available: int = 1_000_000  # used when `offers` is None (not searched yet)
    offers: tuple[Offer, ...] | None = None  # the last offer search's answer
    terms: OfferTerms | None = None
    exclusions: Exclusions = field(default_factory=Exclusions)
    history: History = field(default_factory=dict)  # our own record per machine, for ranking
    memory: Memory | None = None  # our faded record per machine, host, model and price band
    create_cap: int | None = None  # at most this many creates now (one while the market is new)
    # market seconds an I/O deadline is never judged under: the policy's floor in wall seconds
    # times the market's time scale (1 on a real market, where it changes nothing)
    io_floor_s: float = 0.0
    work: WorkOutlook | None = None  # sized jobs: offers ranked by delivered work (delivery.py)
    blame: BlameView | None = None  # what the blame book knows (blame_rules.py)
    slow: dict[int, Slow] = field(default_factory=dict)  # proven hosts slow for their price
    # proven hosts whose running job moves to a free, cheaper one (worth/swap.moves_off)
    moving: dict[int, str] = field(default_factory=dict)
    bidding: BidTerms | None = None  # the interruptible tier's terms (None: on-demand only)
    # held rentals already given up whose destroy failed (or that came back): destroyed again
    destroys_due: tuple[int, ...] = ()

    @property
    def idle_rule_active(self) -> bool:
        """Idle verified instances are the point while a jobless fleet is assembled; the idle
        watchdog applies once there was work and the queue is empty."""
        return self.jobs_total > 0 and self.jobs_pending == 0

    @property
    def proven_paused(self) -> int:
        """Proven bid rentals an outbid paused, not let go: each may resume or be rebid, so the
        campaign does not end for want of offers while one waits."""
        return sum(
            1
            for a in self.attempts
            if a.phase == Phase.STOPPED
            and a.passed_preflight
            and a.bid is not None
            and (a.outbid_at is not None or a.resumed)
        )

    @property
    def jobs_held(self) -> int:
        """Jobs that exited on a bid rental an outbid has paused since: their output waits on
        its disk for the resume (`bidding.OUTPUT_WAIT_S`), and no other host can take them."""
        return sum(
            1 for a in self.attempts if a.phase == Phase.STOPPED and a.bid is not None and a.busy
        )


@dataclass(frozen=True)
class Create:
    rule: str
    reason: str
    offer: Offer | None = None  # the offer chosen (fit, sane, best ranked)
    why: str = ""  # why that offer: the sentence the ledger records with the choice
    bid: float | None = None  # rent it on the interruptible tier at this bid ($/h)


@dataclass(frozen=True)
class Abandon:
    """Give up on an attempt that never passed its preflight: destroy it, quarantine its machine."""

    instance_id: int
    machine_id: int | None
    rule: str
    reason: str
    failure_class: str
    quarantine: Quarantine | None = None  # what its failure earns its machine under the policy

    @classmethod
    def of(cls, a: AttemptView, rule: str, reason: str, failure_class: str) -> Abandon:
        if a.passed_preflight:
            raise ValueError(
                f"instance {a.instance_id} passed its preflight: automation may only stop it"
            )
        return cls(a.instance_id, a.machine_id, rule, reason, failure_class)


@dataclass(frozen=True)
class Stop:
    instance_id: int
    rule: str
    reason: str
    failure_class: str | None = None  # set when the host is not to be trusted again: quarantine
    quarantine: Quarantine | None = None  # filled in by `decide` from the policy


@dataclass(frozen=True)
class StartPreflight:
    instance_id: int
    rule: str = "preflight"
    reason: str = "running and reachable: prove it computes"


@dataclass(frozen=True)
class Verify:
    instance_id: int
    rule: str
    reason: str
    by_preflight: bool


@dataclass(frozen=True)
class Finish:
    ok: bool
    rule: str
    reason: str


@dataclass(frozen=True)
class Rebid:
    """Raise an outbid rental's bid (the market's change-bid call)."""

    instance_id: int
    price: float
    rule: str
    reason: str


@dataclass(frozen=True)
class Move:
    """Stop waiting for an outbid rental: its job moved on from its last checkpoint; the
    rental is stopped explicitly (an explicit stop never resumes by itself), never destroyed."""

    instance_id: int
    rule: str
    reason: str


@dataclass(frozen=True)
class Resume:
    """A proven rental that resumed by itself after an outbid, taken back into service."""

    instance_id: int
    rule: str
    reason: str


@dataclass(frozen=True)
class Restart:
    """Start a proven rental we stopped for want of work again, before renting a new one: it
    boots in a minute with its image and data, and it has delivered (policy `reuse_stopped`)."""

    instance_id: int
    rule: str
    reason: str


Decision = Union[  # noqa: UP007
    Create, Abandon, Stop, StartPreflight, Verify, Finish, Rebid, Move, Resume, Restart
]


def fmt_span(seconds: float) -> str:
    s = max(0, int(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s"


def give_up(a: AttemptView, rule: str, reason: str, failure_class: str) -> Abandon | Stop:
    """Abandon an attempt that never proved itself; a proven one (rebooting, say) is stopped."""
    if a.passed_preflight:
        return Stop(a.instance_id, rule, reason)
    return Abandon.of(a, rule, reason, failure_class)
