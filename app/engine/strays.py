"""Rentals under the campaign's label that the fleet does not hold (a cancelled create, a lost
answer): the campaign's until the market shows them gone, so the release and an end hold them."""

from __future__ import annotations

from ..market.errors import REFUSALS
from ..market.protocol import Market
from .actions import Actions
from .journal import Journal
from .recovery import Recovery


async def hold_strays(
    market: Market, actions: Actions, recovery: Recovery, journal: Journal, why: str, wait: bool
) -> int:
    """Hold every rental listed under this campaign's label that is not held; with `wait`, every
    create in flight answered first. How many were taken; a list failure is said."""
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
