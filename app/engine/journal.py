"""The journal: the engine's only writer to the ledger and to the decision log. A market change is
written as its intent, each try, then its outcome, so a crash mid-call can be settled."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..ledger import EventKind, Ledger
from .rentals import Writer

if TYPE_CHECKING:
    from ..market.protocol import Clock
    from .attempt import Attempt

K = EventKind


class Journal:
    def __init__(
        self, ledger: Ledger, campaign: str, clock: Clock, log: Callable[[str], None] = print
    ) -> None:
        self.ledger = ledger
        self.campaign = campaign
        self.clock = clock
        self.log = log
        self.lines: list[str] = []  # the decision log's tail
        self.lines_total = 0  # how many lines were said in all
        self.writer = Writer(self)  # every rental update goes through it (`rentals.py`)

    def say(self, line: str) -> None:
        self.lines_total += 1
        self.lines.append(line)
        del self.lines[:-500]
        self.log(line)

    def ctx(self, a: Attempt) -> dict[str, Any]:
        """The columns every event about an attempt carries."""
        return {
            "campaign": self.campaign,
            "instance_id": a.instance_id,
            "machine_id": a.machine_id,
            "host_id": a.host_id,
            "gpu_name": a.gpu_name,
            "gpu_dph": a.gpu_dph,
            "storage_dph": a.storage_dph,
            "offer_id": a.offer.id if a.offer else None,
        }

    def fact(
        self,
        kind: EventKind,
        a: Attempt | None,
        *,
        reason: str,
        actor: str = "engine",
        at: float | None = None,
        ok: bool | None = None,
        detail: dict[str, Any] | None = None,
        **context: Any,
    ) -> int:
        """A fact about an attempt (or, with `a=None`, the campaign), by the engine unless `actor`
        says who; dated now unless `at` says when."""
        ctx = self.ctx(a) if a is not None else {"campaign": self.campaign}
        ctx.update(context)
        return self.ledger.record(
            kind,
            at=self.clock.now() if at is None else at,
            actor=actor,
            reason=reason,
            ok=ok,
            detail=detail,
            **ctx,
        )

    def samples(self, rows: list[dict[str, Any]]) -> None:
        self.ledger.add_samples(rows)

    def intent(
        self,
        kind: EventKind,
        ctx: dict[str, Any],
        *,
        actor: str,
        reason: str,
        detail: dict[str, Any] | None = None,
    ) -> int:
        return self.ledger.intent(
            kind, at=self.clock.now(), actor=actor, reason=reason, detail=detail, **ctx
        )

    def sent(self, seq: int, a: Attempt, actor: str, at: float, previous: str | None) -> None:
        """One try of a change, written as it leaves."""
        self.ledger.record(
            K.SENT,
            at=at,
            actor=actor,
            reason="request sent" if previous is None else f"sent again: the last try {previous}",
            intent_seq=seq,
            detail={"after": previous},
            **self.ctx(a),
        )

    def outcome(
        self,
        seq: int,
        *,
        at: float,
        ok: bool,
        error: str | None = None,
        detail: dict[str, Any] | None = None,
        **context: Any,
    ) -> int:
        return self.ledger.outcome(seq, at=at, ok=ok, error=error, detail=detail, **context)
