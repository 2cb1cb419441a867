"""What an operator may ask of the engine, as typed intents (the dashboard's keys become these;
the engine's thread applies them with `Supervisor.apply`). Destroy is the only intent that can
remove a proven instance, and it carries the operator's typed confirmation."""

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
    """Hand an instance rentwatch did not create over to automation (recorded as a human act):
    until then it is only shown, priced and logged."""

    instance_id: int
    reason: str = "operator handed it over to automation"


Intent = Union[  # noqa: UP007
    StopIntent, StartIntent, DestroyIntent, CreateIntent, FleetSizeIntent, HandOverIntent
]
