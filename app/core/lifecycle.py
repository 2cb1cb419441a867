"""The instance lifecycle as an explicit, strict state machine, with its history: an immutable value
(`moved` answers the next version); an illegal move is refused and kept in `refused`, and
`engine/rentals.py` writes it to the ledger. `Lifecycle.proven` is the one "passed a compute
preflight"; the `VERIFIED` phase says it is in service now."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class Phase(StrEnum):
    REQUESTED = "requested"  # create sent, not listed by the market yet
    BOOTING = "booting"  # listed (or started again): pulling the image, loading
    RUNNING = "running"  # the container runs; not yet proven
    VERIFYING = "verifying"  # the compute preflight is under way
    VERIFIED = "verified"  # in service: proven (or trusted) and held
    STOPPED = "stopped"  # stopped by us, a person or the market; storage still bills
    ABANDONED = "abandoned"  # given up before proving itself; its destroy is due
    DESTROYED = "destroyed"  # destroyed by our call: nothing bills
    LOST = "lost"  # gone from the market without our destroy


P = Phase
# What each transition means:
LEGAL: dict[Phase, frozenset[Phase]] = {
    # listed at last; or seen running at once; or given up / stopped / destroyed / gone before
    P.REQUESTED: frozenset({P.BOOTING, P.RUNNING, P.ABANDONED, P.DESTROYED, P.LOST, P.STOPPED}),
    # the container came up; or the boot rules gave up on it; or a stop / destroy / vanishing
    P.BOOTING: frozenset({P.RUNNING, P.ABANDONED, P.STOPPED, P.DESTROYED, P.LOST}),
    # preflight started; or trusted on sight (naive); or given up / stopped / gone
    P.RUNNING: frozenset({P.VERIFYING, P.VERIFIED, P.ABANDONED, P.STOPPED, P.DESTROYED, P.LOST}),
    # the preflight passed; or failed (abandon); or the host restarted its container (RUNNING)
    P.VERIFYING: frozenset({P.VERIFIED, P.ABANDONED, P.STOPPED, P.DESTROYED, P.LOST, P.RUNNING}),
    # in service: only a stop (automation's strongest act), a human destroy, or vanishing
    P.VERIFIED: frozenset({P.STOPPED, P.DESTROYED, P.LOST}),
    # started again (boots; or adopted running / verified); destroyed; released at the end
    P.STOPPED: frozenset({P.BOOTING, P.RUNNING, P.VERIFIED, P.DESTROYED, P.LOST, P.ABANDONED}),
    # the destroy went through; or a stop stood in for it; or it vanished first
    P.ABANDONED: frozenset({P.DESTROYED, P.STOPPED, P.LOST}),
    P.DESTROYED: frozenset(),
    # our destroy of a lost instance went through after all; or it is listed again (the write-off
    # was wrong: the market lied or would not answer), held again where it stood
    P.LOST: frozenset({P.DESTROYED, P.BOOTING, P.VERIFIED, P.STOPPED, P.ABANDONED}),
}
ALIVE = frozenset({P.REQUESTED, P.BOOTING, P.RUNNING, P.VERIFYING, P.VERIFIED})
HELD = ALIVE | {P.ABANDONED}  # things the controller must stop or destroy before it dies
IN_FLIGHT = frozenset({P.REQUESTED, P.BOOTING, P.RUNNING, P.VERIFYING})  # not in service yet


# the failure class of a give-up that says nothing of the host: the campaign's end, a person,
# the campaign's own fault, a bid refused at create, the market's stop before it was proven
CANCELLED = "cancelled"


def is_dud(verified: bool, given_up_or_gone: bool, failure_class: str | None = None) -> bool:
    """The one definition of a dud: never delivered, through its host's fault (given up for the
    host's failure, or gone). One given up as `CANCELLED` is counted apart (`core.figures`). The
    ledger's `dud` column computes the same."""
    return not verified and given_up_or_gone and failure_class != CANCELLED


@dataclass(frozen=True, slots=True)
class Transition:
    at: float
    before: Phase
    after: Phase
    why: str


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """A rental's lifecycle as an immutable value: each change is a new version
    (`engine/rentals.py` holds the one writer that puts it on the rental)."""

    phase: Phase = Phase.REQUESTED
    history: tuple[Transition, ...] = ()
    refused: tuple[Transition, ...] = ()
    proven: bool = False  # passed a compute preflight once: automation may never destroy it
    version: int = 0  # how many changes it has been through

    def moved(self, to: Phase, at: float, why: str) -> Lifecycle:
        """The next version: a legal transition taken, or an illegal one kept in `refused`
        (the phase stays) for the shell to report. Staying in the phase changes nothing."""
        if to == self.phase:
            return self.bumped()
        t = Transition(at, self.phase, to, why)
        if to not in LEGAL[self.phase]:
            return replace(self, refused=(*self.refused, t), version=self.version + 1)
        return replace(self, phase=to, history=(*self.history, t), version=self.version + 1)

    def with_proof(self, proven: bool) -> Lifecycle:
        return replace(self, proven=proven, version=self.version + 1)

    def bumped(self) -> Lifecycle:
        return replace(self, version=self.version + 1)

    def since(self, phase: Phase) -> float | None:
        """When the first move into `phase` happened (None: never)."""
        return next((t.at for t in self.history if t.after == phase), None)

    def last(self, phase: Phase) -> float | None:
        """When the latest move into `phase` happened (None: never)."""
        return max((t.at for t in self.history if t.after == phase), default=None)

    def ended_at(self) -> float | None:
        """When it last left service (stopped, abandoned, destroyed, lost); None if never, or
        if it is back in service (started again, or listed again after a write-off)."""
        if self.phase in ALIVE:
            return None
        for t in reversed(self.history):
            if t.after in (P.DESTROYED, P.LOST, P.ABANDONED, P.STOPPED):
                return t.at
        return None
