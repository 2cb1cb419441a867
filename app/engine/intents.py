"""What an operator may ask of the engine, as typed intents, and what comes of one, a `Reply`. One
door takes them all, `Supervisor.apply`. Destroy is the only intent that can remove a proven
instance, and it carries the operator's typed confirmation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..core.errors import RentwatchError


class AutomationRefused(RentwatchError):
    title = "refused"


@dataclass(frozen=True)
class DestroyConfirmation:
    """What the operator typed to confirm a destroy: it must name the instance."""

    instance_id: int
    typed: str

    def valid(self) -> bool:
        return self.typed.strip() == str(self.instance_id)


@dataclass(frozen=True)
class StopIntent:
    instance_id: int
    reason: str = "operator stop"


@dataclass(frozen=True)
class StartIntent:
    instance_id: int
    reason: str = "operator start"


@dataclass(frozen=True)
class DestroyIntent:
    confirmation: DestroyConfirmation
    reason: str = "operator destroy"

    @property
    def instance_id(self) -> int:
        return self.confirmation.instance_id


@dataclass(frozen=True)
class CreateIntent:
    reason: str = "operator asked for one more instance"


@dataclass(frozen=True)
class FleetSizeIntent:
    """The wanted number of verified instances (the dashboard's `+` and `-`)."""

    size: int
    reason: str = "operator set the fleet size"


@dataclass(frozen=True)
class HandOverIntent:
    """Hand an instance rentwatch did not create over to automation (a human act)."""

    instance_id: int
    reason: str = "operator handed it over to automation"


@dataclass(frozen=True)
class EndIntent:
    """End the campaign: stop what it holds, or with `destroy` destroy all of it; `typed` must then
    be the campaign's name (checked in app/engine/ending.py)."""

    destroy: bool = False
    typed: str = ""


Intent = Union[  # noqa: UP007
    StopIntent,
    StartIntent,
    DestroyIntent,
    CreateIntent,
    FleetSizeIntent,
    HandOverIntent,
    EndIntent,
]

# what a campaign that has ended still takes: what lets go of what it holds (a stop, a destroy,
# the end again); what would start, rent or take over anything (a start, a create, the wanted
# fleet, a hand-over) is refused, for a rental started then would bill with nothing supervising it
AFTER_END = (StopIntent, DestroyIntent, EndIntent)


@dataclass(frozen=True)
class Reply:
    """What came of one intent: whether it took, the message, the instances acted on (and which were
    destroyed), and why it was refused (`not_held`: not this campaign's)."""

    done: bool
    message: str
    acted_on: tuple[int, ...] = ()
    destroyed: tuple[int, ...] = ()
    refused: str | None = None
    not_held: bool = False
    lines: tuple[str, ...] = ()

    @classmethod
    def refusal(cls, why: str, not_held: bool = False) -> Reply:
        return cls(False, why, refused=why, not_held=not_held)

    @classmethod
    def of(cls, done: bool, iid: int, did: str, failed: str, destroyed: bool = False) -> Reply:
        """One instance's act: `did` when it took, `failed` when the market call did not."""
        if not done:
            return cls(False, failed)
        return cls(True, did, (iid,), (iid,) if destroyed else ())
