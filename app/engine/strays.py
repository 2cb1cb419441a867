"""Rentals under the campaign's label that the fleet does not hold: a create whose caller a
signal cancelled, or whose answer was lost and the label lookup failed. Until the market shows
such a rental gone it is the campaign's, so the release and a person's end hold it first."""

from __future__ import annotations

from ..market.errors import REFUSALS
from ..market.protocol import Market
from .actions import Actions
from .journal import Journal
from .recovery import Recovery


async def hold_strays(
    market: Market, actions: Actions, recovery: Recovery, journal: Journal, why: str, wait: bool
) -> int:
    """Hold every rental the market lists under this campaign's label that is not held;
    with `wait`, every create in flight answered first (its rental lands in the fleet), else
    those left to land (a person's end destroys them as they do). Returns how many were
    taken; a market that cannot be listed is said, not raised."""
    if wait:
        await actions.landed()
    before = len(recovery.fleet.attempts)
    try:
        rows = await market.list_instances()
    except REFUSALS as exc:
        journal.say(f"{why} could not list the market for the campaign's label: {exc}")
        return 0
    rows = [r for r in rows if r.label not in actions.labels_in_flight]
    recovery.adopt_strays(rows, market.answered_at(), adopt_all=False)
    found = len(recovery.fleet.attempts) - before
    if found:
        journal.say(f"{why} {found} rental(s) under the campaign's label were not held: held now")
    return found
