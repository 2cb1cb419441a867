"""What can happen to a rental, each a small immutable value named for the event, which
`rentals.apply` (the one writer) applies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, dataclass_transform

from ..core.billing import Mark
from ..core.lifecycle import Phase
from ..ledger import EventKind

if TYPE_CHECKING:
    from .attempt import Attempt


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
@dataclass(frozen=True)
class Update:
    """What happened to the rental `a`: each update below is one, and `rentals.apply` knows
    every one. Each is a frozen dataclass by being one (`__init_subclass__`)."""

    a: Attempt

    def __init_subclass__(cls) -> None:
        dataclass(frozen=True)(cls)


@dataclass(frozen=True, slots=True)
class Said:
    """The ledger event and the log line an update carries, where the caller words them."""

    kind: EventKind
    at: float
    actor: str
    reason: str
    detail: dict[str, Any] | None = None
    line: str = ""


class Set(Update):
    """Fields of it that change with nothing else to say: `rentals.apply` sets them by name
    (never its lifecycle or its billing marks, which only the updates below move)."""

    fields: dict[str, Any]


class ChangeTookEffect(Update):
    """Our create, stop, start or destroy went through at `at`: its billing mark."""

    at: float
    kind: str


class FoundChanged(Update):
    """A stop or start found at a restart that the ledger did not see."""

    event: Said


class Replayed(Update):
    """Billing marks (and a price) an earlier run's ledger holds for it, read back."""

    marks: list[Mark]
    price: float | None = None


class HandedOver(Update):
    """Supervised from now on (it was only observed)."""

    at: float


class Repriced(Update):
    """An accepted increase in force from `at` (its contract's end date)."""

    at: float
    price: float
    pending_id: int


class BidRestored(Update):
    """Its bid from the ledger (an adopted bid rental): whether its last stop was ours, since
    when an outbid has paused it, and the bid in force (`rebid`, if a raise changed it);
    `paused_unproven`: found paused by an outbid before it was proven."""

    bid: float
    bid_floor: float | None
    ours: bool
    paused_at: float | None
    rebid: float | None
    paused_unproven: bool


class Outbid(Update):
    bid_floor: float | None
    event: Said


class ResumedItself(Update):
    """A bid rental the market paused runs again by itself: it bills from `event.at`."""

    event: Said


class OutbidAgain(Update):
    """A resumed bid rental outbid again before the rules took it back."""

    at: float


class BidChanged(Update):
    """Its bid changed to `price` (the market took it)."""

    price: float
    event: Said


class Listed(Update):
    """The market lists a rental it was asked for: its image is on the way."""

    at: float


class CameUp(Update):
    """Its container runs (booted, or adopted running)."""

    at: float
    why: str = "container running"


class PreflightStarted(Update):
    at: float


class Verified(Update):
    """In service: proven by its preflight, or trusted on sight (`by_preflight` False)."""

    at: float
    rule: str
    reason: str
    by_preflight: bool
    detail: dict[str, Any]


class Resumed(Update):
    """A bid rental that resumed by itself taken back into service (its proof stands)."""

    at: float
    reason: str


class Started(Update):
    """Our start went through: it boots again, its boot deadline counted from `at`."""

    at: float
    reason: str


class Stopped(Update):
    """Our stop went through (its intent and outcome are the change's own events)."""

    at: float
    actor: str
    reason: str
    usd: float  # what it has cost so far, for the log line


class StoppedByMarket(Update):
    """A stop nobody here asked for: a contract's end, a zero balance, an outbid."""

    at: float
    why: str
    said: str  # the market's intended/current/next states
    proven: bool  # a proven rental keeps its proof; an unproven one is the rules' to replace


class Destroyed(Update):
    at: float
    reason: str


class GaveUp(Update):
    """Given up before it proved itself: its destroy is due. `line`: the log's line, if any."""

    at: float
    actor: str
    reason: str
    failure_class: str
    detail: dict[str, Any] = field(default_factory=dict)
    line: str = ""


class Lost(Update):
    """Gone from the market without our destroy."""

    at: float
    why: str


class Returned(Update):
    """Listed again after its write-off: held again as `to`, billed as if never written off."""

    at: float
    to: Phase
    why: str
    detail: dict[str, Any]
    preflight_again: bool  # a finished preflight that proved nothing is run afresh


class Adopted(Update):
    """Found on the market at a start: where it stands, and whether it passed a preflight."""

    at: float
    status: str | None
    status_msg: str | None
    ssh_host: str | None
    ssh_port: int | None
    proven: bool
    stopped: bool


class RowSeen(Update):
    """The market's row for it, as the poll reads it: its status, route and billed price."""

    at: float
    status: str | None
    status_msg: str | None
    ssh_host: str | None
    ssh_port: int | None
    gpu_dph: float
    changed_at: float  # when a change of status took effect (what the GPU is billed from)
    listed: bool  # in a list answer, or answered when asked: not unseen


class LeftOut(Update):
    """A list answer left it out: one more poll unseen (the first says so in the ledger)."""

    at: float


class RowUnread(Update):
    """A held instance's row could not be read: billed its worst case until it is read again."""

    at: float
    problem: str


class SshFailed(Update):
    """A try that ended without the host's answer; `why` replaces the shown error."""

    why: str | None = None


class WentSilent(Update):
    """A session to its host got no answer: the next poll asks the market about it."""

    at: float


class KeyChanged(Update):
    """Its SSH host key changed after it was pinned: distrusted for good (said once)."""

    why: str


class Broken(Update):
    """The tender saw this proven host break (a fatal XID): the next poll's rules stop it."""

    rule: str
    reason: str
    failure_class: str
    detail: dict[str, Any]


class Sampled(Update):
    """The sampler's readings (already in the ledger): the idle and throttle evidence they carry."""

    at: float
    rows: list[dict[str, Any]]
    idle_since: float | None
    idle_known: bool  # the first reading had a utilisation
    throttle_ratio: float
