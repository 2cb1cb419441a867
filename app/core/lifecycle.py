"""The instance lifecycle as an explicit state machine, with its history."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Phase(StrEnum):
    REQUESTED = "requested"
    BOOTING = "booting"
    RUNNING = "running"
    VERIFYING = "verifying"
    VERIFIED = "verified"
    STOPPED = "stopped"
    ABANDONED = "abandoned"
    DESTROYED = "destroyed"
    LOST = "lost"


P = Phase
LEGAL: dict[Phase, frozenset[Phase]] = {
    P.REQUESTED: frozenset({P.BOOTING, P.RUNNING, P.ABANDONED, P.DESTROYED, P.LOST, P.STOPPED}),
    P.BOOTING: frozenset({P.RUNNING, P.ABANDONED, P.STOPPED, P.DESTROYED, P.LOST}),
    P.RUNNING: frozenset({P.VERIFYING, P.VERIFIED, P.ABANDONED, P.STOPPED, P.DESTROYED, P.LOST}),
    P.VERIFYING: frozenset({P.VERIFIED, P.ABANDONED, P.STOPPED, P.DESTROYED, P.LOST, P.RUNNING}),
    P.VERIFIED: frozenset({P.STOPPED, P.DESTROYED, P.LOST}),
    P.STOPPED: frozenset({P.BOOTING, P.RUNNING, P.VERIFIED, P.DESTROYED, P.LOST, P.ABANDONED}),
    P.ABANDONED: frozenset({P.DESTROYED, P.STOPPED, P.LOST}),
    P.DESTROYED: frozenset(),
    P.LOST: frozenset({P.DESTROYED}),
}
ALIVE = frozenset({P.REQUESTED, P.BOOTING, P.RUNNING, P.VERIFYING, P.VERIFIED})
HELD = ALIVE | {P.ABANDONED}  # things the controller must stop or destroy before it dies


@dataclass(frozen=True, slots=True)
class Transition:
    at: float
    before: Phase
    after: Phase
    why: str


@dataclass
class Lifecycle:
    phase: Phase = Phase.REQUESTED
    history: list[Transition] = field(default_factory=list)
    refused: list[Transition] = field(default_factory=list)
    ever_verified: bool = False

    def move(self, to: Phase, at: float, why: str) -> bool:
        """Take a transition if it is legal; an illegal one is kept in `refused` and ignored."""
        if to == self.phase:
            return True
        t = Transition(at, self.phase, to, why)
        if to not in LEGAL[self.phase]:
            self.refused.append(t)
            return False
        self.history.append(t)
        self.phase = to
        if to == Phase.VERIFIED:
            self.ever_verified = True
        return True
