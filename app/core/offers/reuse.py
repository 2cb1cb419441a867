"""Proven rentals we stopped for want of work, started again before anything new is rented (policy
`reuse_stopped`): a stopped rental boots in a minute with its data and has delivered; a create
boots for many minutes and may be a dud. Pure."""

from __future__ import annotations

from ..decisions import FleetSnapshot, Restart


def restarts(fleet: FleetSnapshot, n: int, verified: int, target: int) -> list[Restart]:
    """Up to `n` starts, the cheapest rentals first."""
    pick = sorted((a for a in fleet.attempts if a.reusable), key=lambda a: (a.dph, a.instance_id))
    return [
        Restart(
            a.instance_id,
            "rule:reuse",
            f"{verified} of {target} verified: proven i:{a.instance_id}, stopped by us with its "
            "host fine (for want of work, or a run's end), started again before renting a new one",
        )
        for a in pick[: max(0, n)]
    ]
