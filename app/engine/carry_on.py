"""A restart carries on: a proven rental an earlier run stopped itself keeps that stop's rule when
adopted, so the reuse rule starts it again while work remains. A stop nobody here made, or a
person's own, is not undone."""

from __future__ import annotations

from collections.abc import Sequence

from ..ledger import Event, EventKind
from .attempt import Attempt
from .journal import Journal
from .updates import OurStopKept

K = EventKind
NOT_OURS = ("market", "reconcile", "watchdog")


def keep_our_stop(journal: Journal, a: Attempt, history: Sequence[Event]) -> None:
    """`a` was adopted stopped: where its last change is a stop of ours, that stop stands."""
    changes = [
        e
        for e in history
        if e.kind in (K.STOP, K.START, K.CREATE, K.RESUMED)
        and e.phase != "intent"
        and e.ok is not False
    ]
    last = changes[-1] if changes else None
    if last is not None and last.kind == K.STOP and not last.actor.startswith(NOT_OURS):
        journal.writer.emit(OurStopKept(a, last.actor))
