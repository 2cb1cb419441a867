"""What can happen to a rental, each a small immutable value named for the event, which
`rentals.apply` (the one writer) applies."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.billing import Mark
from ..core.lifecycle import Phase
from ..core.preflight.verdict import Verdict
from ..ledger import EventKind

if TYPE_CHECKING:
    from .attempt import Attempt


@dataclass(frozen=True, slots=True)
class Said:
    """The ledger event and the log line an update carries, where the caller words them."""

    kind: EventKind
    at: float
    actor: str
    reason: str
    detail: dict[str, Any] | None = None
    line: str = ""


@dataclass(frozen=True, slots=True)
class ChangeTookEffect:
    """Our create, stop, start or destroy went through at `at`: its billing mark."""

    a: Attempt
    at: float
    kind: str


@dataclass(frozen=True, slots=True)
class FoundChanged:
    """A stop or start found at a restart that the ledger did not see."""

    a: Attempt
    event: Said


@dataclass(frozen=True, slots=True)
class Replayed:
    """Billing marks (and a price) an earlier run's ledger holds for it, read back."""

    a: Attempt
    marks: list[Mark]
    price: float | None = None


@dataclass(frozen=True, slots=True)
class RestartRefused:
    """The market would not start it again: not tried again by the rules."""

    a: Attempt


@dataclass(frozen=True, slots=True)
class DeadlinesFrom:
    """A start or a hand-over: its boot deadline counts from `at`."""

    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class Touched:
    """A person's act on it (market time), for the rules' word on a recent touch."""

    a: Attempt
    at: float
    act: str


@dataclass(frozen=True, slots=True)
class HandedOver:
    """Supervised from now on (it was only observed)."""

    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class LookedAt:
    """The poll asked the market for it, as its silence wanted."""

    a: Attempt


@dataclass(frozen=True, slots=True)
class JobSaid:
    """The running job's last log line, for the dashboard."""

    a: Attempt
    line: str


@dataclass(frozen=True, slots=True)
class OurStopKept:
    """Adopted stopped, by a stop of ours an earlier run made: the reuse rule may start it."""

    a: Attempt
    actor: str


@dataclass(frozen=True, slots=True)
class IncreaseAccepted:
    """Its host's price increase accepted: the new GPU price applies from `at`."""

    a: Attempt
    at: float
    price: float
    pending_id: int


@dataclass(frozen=True, slots=True)
class Repriced:
    """An accepted increase in force from `at` (its contract's end date)."""

    a: Attempt
    at: float
    price: float
    pending_id: int


@dataclass(frozen=True, slots=True)
class BidRestored:
    """Its bid from the ledger (an adopted bid rental; `Attempt.bid_held`); `paused_unproven`:
    found paused by an outbid before it was proven."""

    a: Attempt
    bid: float
    bid_floor: float | None
    ours: bool
    paused_at: float | None
    rebid: float | None
    paused_unproven: bool


@dataclass(frozen=True, slots=True)
class BidFloorSeen:
    a: Attempt
    bid_floor: float


@dataclass(frozen=True, slots=True)
class Outbid:
    a: Attempt
    bid_floor: float | None
    event: Said


@dataclass(frozen=True, slots=True)
class ResumedItself:
    """A bid rental the market paused runs again by itself: it bills from `event.at`."""

    a: Attempt
    event: Said


@dataclass(frozen=True, slots=True)
class OutbidAgain:
    """A resumed bid rental outbid again before the rules took it back."""

    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class RebidTried:
    a: Attempt


@dataclass(frozen=True, slots=True)
class BidChanged:
    """Its bid changed to `price` (the market took it)."""

    a: Attempt
    price: float
    event: Said


@dataclass(frozen=True, slots=True)
class Listed:
    """The market lists a rental it was asked for: its image is on the way."""

    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class CameUp:
    """Its container runs (booted, or adopted running)."""

    a: Attempt
    at: float
    why: str = "container running"


@dataclass(frozen=True, slots=True)
class PreflightStarted:
    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class Verified:
    """In service: proven by its preflight, or trusted on sight (`by_preflight` False)."""

    a: Attempt
    at: float
    rule: str
    reason: str
    by_preflight: bool
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Resumed:
    """A bid rental that resumed by itself taken back into service (its proof stands)."""

    a: Attempt
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class Started:
    """Our start went through: it boots again."""

    a: Attempt
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class Stopped:
    """Our stop went through (its intent and outcome are the change's own events)."""

    a: Attempt
    at: float
    actor: str
    reason: str
    usd: float  # what it has cost so far, for the log line


@dataclass(frozen=True, slots=True)
class StoppedByMarket:
    """A stop nobody here asked for: a contract's end, a zero balance, an outbid."""

    a: Attempt
    at: float
    why: str
    said: str  # the market's intended/current/next states
    proven: bool  # a proven rental keeps its proof; an unproven one is the rules' to replace


@dataclass(frozen=True, slots=True)
class Destroyed:
    a: Attempt
    at: float
    reason: str


@dataclass(frozen=True, slots=True)
class GaveUp:
    """Given up before it proved itself: its destroy is due. `line`: the log's line, if any."""

    a: Attempt
    at: float
    actor: str
    reason: str
    failure_class: str
    detail: dict[str, Any] = field(default_factory=dict)
    line: str = ""


@dataclass(frozen=True, slots=True)
class Lost:
    """Gone from the market without our destroy."""

    a: Attempt
    at: float
    why: str


@dataclass(frozen=True, slots=True)
class Returned:
    """Listed again after its write-off: held again as `to`, billed as if never written off."""

    a: Attempt
    at: float
    to: Phase
    why: str
    detail: dict[str, Any]
    preflight_again: bool  # a finished preflight that proved nothing is run afresh


@dataclass(frozen=True, slots=True)
class Adopted:
    """Found on the market at a start: where it stands, and whether it passed a preflight."""

    a: Attempt
    at: float
    status: str | None
    status_msg: str | None
    ssh_host: str | None
    ssh_port: int | None
    proven: bool
    stopped: bool


@dataclass(frozen=True, slots=True)
class RowSeen:
    """The market's row for it, as the poll reads it: its status, route and billed price."""

    a: Attempt
    at: float
    status: str | None
    status_msg: str | None
    ssh_host: str | None
    ssh_port: int | None
    gpu_dph: float
    changed_at: float  # when a change of status took effect (what the GPU is billed from)
    listed: bool  # in a list answer, or answered when asked: not unseen


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A list answer left it out: one more poll unseen (the first says so in the ledger)."""

    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class AnsweredUnread:
    """The market answered for it with a row it could not read: not unseen, not seen."""

    a: Attempt


@dataclass(frozen=True, slots=True)
class RowUnread:
    """A held instance's row could not be read: billed its worst case until it is read again."""

    a: Attempt
    at: float
    problem: str


@dataclass(frozen=True, slots=True)
class IdleSince:
    """Since when its GPU has been idle by the policy (None: busy), from a row or a sample."""

    a: Attempt
    since: float | None


@dataclass(frozen=True, slots=True)
class PreflightRunning:
    """Its preflight's task, started (`PreflightStarted` moves it to verifying first)."""

    a: Attempt
    task: asyncio.Task[Any]


@dataclass(frozen=True, slots=True)
class Tending:
    """Tended from now (in service again): silence counts from its next unanswered look."""

    a: Attempt
    task: asyncio.Task[Any]


@dataclass(frozen=True, slots=True)
class SshWaiting:
    """No try made (no port yet) or none answered yet: what the pane shows meanwhile."""

    a: Attempt
    why: str


@dataclass(frozen=True, slots=True)
class SshFailed:
    """A try that ended without the host's answer; `why` replaces the shown error."""

    a: Attempt
    why: str | None = None


@dataclass(frozen=True, slots=True)
class SshReached:
    a: Attempt


@dataclass(frozen=True, slots=True)
class ProbeAnswered:
    a: Attempt


@dataclass(frozen=True, slots=True)
class Judged:
    """The preflight's verdict, with the probe's document when it answered."""

    a: Attempt
    verdict: Verdict
    doc: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class WentSilent:
    """A session to its host got no answer (`Attempt.went_silent`)."""

    a: Attempt
    at: float


@dataclass(frozen=True, slots=True)
class Answered:
    """A command on its host ran to its end (a connect alone is not an answer)."""

    a: Attempt


@dataclass(frozen=True, slots=True)
class KeyChanged:
    """Its SSH host key changed after it was pinned: distrusted for good (said once)."""

    a: Attempt
    why: str


@dataclass(frozen=True, slots=True)
class WatchdogSeen:
    """Armed on the host; False: a heartbeat found it gone."""

    a: Attempt
    armed: bool


@dataclass(frozen=True, slots=True)
class Broken:
    """The tender saw this proven host break (a fatal XID): the next poll's rules stop it."""

    a: Attempt
    rule: str
    reason: str
    failure_class: str
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Sampled:
    """The sampler's readings (already in the ledger): the idle and throttle evidence they carry."""

    a: Attempt
    at: float
    rows: list[dict[str, Any]]
    idle_since: float | None
    idle_known: bool  # the first reading had a utilisation
    throttle_ratio: float


Update = (
    ChangeTookEffect
    | FoundChanged
    | Replayed
    | RestartRefused
    | DeadlinesFrom
    | Touched
    | HandedOver
    | LookedAt
    | JobSaid
    | OurStopKept
    | IncreaseAccepted
    | Repriced
    | BidRestored
    | BidFloorSeen
    | Outbid
    | ResumedItself
    | OutbidAgain
    | RebidTried
    | BidChanged
    | PreflightRunning
    | Tending
    | SshWaiting
    | SshFailed
    | SshReached
    | ProbeAnswered
    | Judged
    | WentSilent
    | Answered
    | KeyChanged
    | WatchdogSeen
    | Broken
    | Sampled
    | RowSeen
    | LeftOut
    | AnsweredUnread
    | RowUnread
    | IdleSince
    | Listed
    | CameUp
    | PreflightStarted
    | Verified
    | Resumed
    | Started
    | Stopped
    | StoppedByMarket
    | Destroyed
    | GaveUp
    | Lost
    | Returned
    | Adopted
)
