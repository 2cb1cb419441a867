"""What the operator's keys may act on, read off a snapshot: the rules a screen asks before it
sends an intent (the engine refuses what breaks them anyway; these say why first)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ..ledger.holdings import Holding
from .snapshot import InstanceSnap

# what `a` may start: a rental not running (lifecycle: only a stopped one boots again)
STARTABLE = frozenset({"stopped", "outbid"})
GONE = frozenset({"destroyed", "lost"})  # no longer on the market: no key acts on it


def gone(s: InstanceSnap) -> bool:
    return s.phase in GONE


def startable(s: InstanceSnap) -> bool:
    return s.phase in STARTABLE


def stop_shrinks(snap: InstanceSnap, fleet: int) -> bool:
    """Whether the engine lowers the wanted fleet for this stop (engine/operator.py)."""
    in_service = snap.phase in ("verified", "working", "idle") and snap.passed_preflight
    return snap.supervised and in_service and fleet > 0


def left_after_end(listed: Iterable[Holding], destroyed: Collection[int]) -> tuple[int, ...]:
    """The listed rentals an end's reply does not say it destroyed."""
    return tuple(h.instance_id for h in listed if h.instance_id not in destroyed)
