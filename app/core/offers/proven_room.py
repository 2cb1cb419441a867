"""Bid room for a proven machine in proportion to what replacing it would cost: the policy's
`proven_bid_share`. Pure.

A bid's usual room reads the outbid rate alone (`tier.bid_for`). A machine whose record
delivered and whose work costs a third of the next offer's loses more to an outbid than a
stranger does: the work moves to the dearer offer. On held-out 81207:0 the proven RTX 5090 the
floor bought from was outbid twice at 17% over its `min_bid`, and the work ran on strangers at
three times its price. Off in every preset: where no outbid came, the room was paid for
nothing (docs/benchmarks.md, "A proven machine's bid")."""

from __future__ import annotations

from dataclasses import replace

from ..bidding.rules import as_rented, offer_bid
from ..bidding.tier import top_bid
from ..decisions import FleetSnapshot
from ..policy import Policy
from .choice import fit_of, work_scores
from .search_scope import delivered


def room_to(own: float, replacement: float, rate: float, bid: float, share: float) -> float:
    """The bid a proven machine may rise to: `share` of the gap between its expected USD per
    delivered reference GPU-hour (`own`, at `bid`) and its replacement's, at `rate` reference
    GPU-hours an hour. Its boot and duds also bill at the bid, so the gap's whole width would
    rank it a little dearer than the replacement: `share` stays at most 1."""
    return bid + max(0.0, min(share, 1.0)) * max(0.0, replacement - own) * max(rate, 0.0)


def with_proven_room(fleet: FleetSnapshot, policy: Policy) -> FleetSnapshot:
    """The snapshot whose bid terms let each fit offer of a machine that delivered more than it
    failed bid up to `room_to` against the cheapest fit offer of another machine, under the bid's
    caps and the campaign's `max_dph`. Unchanged where the setting is off, the campaign does not
    bid, or the work is not sized."""
    bidding, work = fleet.bidding, fleet.work
    share = policy.proven_bid_share
    terms = fleet.terms
    if share <= 0 or bidding is None or bidding.tier != "interruptible":
        return fleet
    if work is None or terms is None:
        return fleet
    rented = as_rented(fleet.offers, bidding)
    fit = fit_of(rented, terms, policy, fleet.exclusions) or []
    scored = work_scores(fit, fleet.history, work, policy.value_of_time_usd_per_h)
    listed = {o.id: o for o in fleet.offers or ()}
    room: dict[int, float] = {}
    for usd, o, _ in scored:
        if o.machine_id is None or not delivered(fleet.history.get(o.machine_id)):
            continue
        others = [u for u, x, _ in scored if x.machine_id != o.machine_id]
        bid, _ = offer_bid(listed[o.id], bidding)
        if not others or bid is None:
            continue
        extras = o.dph_total - bid  # storage beside the bid: `max_dph` counts both
        top = min(top_bid(o.gpu_dph, bidding.cap), terms.max_dph - extras)
        rate = work.rate(o.gpu_name, o.machine_id)
        to = min(room_to(usd, min(others), rate, bid, share), top)
        if to > bid:
            room[o.machine_id] = round(to, 4)
    if not room:
        return fleet
    return replace(fleet, bidding=replace(bidding, room=tuple(sorted(room.items()))))
