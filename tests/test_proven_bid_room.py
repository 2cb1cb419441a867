"""Bid room for a proven machine in proportion to what its replacement costs (policy
`proven_bid_share`, core/offers/proven_room.py): how far the bid may rise, which machines earn
it, and that `decide()` and the offers preview bid alike."""

from __future__ import annotations

import dataclasses

import pytest
from rentwatch.core.bidding.rules import BidTerms, offer_bid
from rentwatch.core.decisions import Create, FleetSnapshot
from rentwatch.core.delivery import WorkOutlook
from rentwatch.core.errors import ConfigErrors
from rentwatch.core.models import Offer
from rentwatch.core.offers.choice import OfferTerms
from rentwatch.core.offers.picks import picks
from rentwatch.core.offers.proven_room import room_to, with_proven_room
from rentwatch.core.policy import DEFAULT
from rentwatch.core.preflight.gpu_specs import expected_tflops
from rentwatch.core.rules import decide

ROOMY = dataclasses.replace(DEFAULT, proven_bid_share=0.5)
BIDDING = BidTerms("interruptible", "interruptible")


@pytest.mark.parametrize(
    ("own", "replacement", "rate", "bid", "share", "to"),
    [
        (0.10, 0.30, 1.0, 0.10, 0.5, 0.20),  # half the gap of $0.20 per unit at 1 unit an hour
        (0.10, 0.30, 2.0, 0.10, 0.5, 0.30),  # twice the work an hour: twice the room
        (0.10, 0.30, 1.0, 0.10, 1.0, 0.30),  # the whole gap: its work costs the replacement's
        (0.10, 0.30, 1.0, 0.10, 3.0, 0.30),  # never past the whole gap
        (0.30, 0.10, 1.0, 0.10, 0.5, 0.10),  # dearer than its replacement: no room
        (0.10, 0.30, 1.0, 0.10, 0.0, 0.10),  # off
    ],
)
def test_the_room_is_a_share_of_the_replacements_extra_cost(own, replacement, rate, bid, share, to):
    assert room_to(own, replacement, rate, bid, share) == pytest.approx(to)


def _bid_offer(oid: int, machine: int, gpu: str, min_bid: float, on_demand: float) -> Offer:
    return Offer(oid, machine, 1, gpu, 1, min_bid + 0.01, on_demand, 0.1, 12.8, 0.98, None,
                 24576.0, "US", bid_floor=min_bid)  # fmt: skip


# 81207:0's shape: a proven RTX 5090 at a tenth of on-demand on a bid, strangers of the same
# model dearer by three times
PROVEN = _bid_offer(1, 501, "RTX 5090", 0.10, 0.60)
STRANGER = _bid_offer(2, 502, "RTX 5090", 0.30, 0.60)


def _snap(history: dict[int, tuple[float, float, float]], **kw: object) -> FleetSnapshot:
    work = WorkOutlook(expected_tflops("RTX 4090") or 1.0, 1.0)
    base = dict(
        fleet=1, max_creates=40, creates=0, budget_usd=40, spent_usd=0, attempts=(),
        jobs_pending=1, jobs_total=1, offers=(PROVEN, STRANGER),
        terms=OfferTerms(max_dph=0.5, image_cuda=12.4), bidding=BIDDING, history=history,
        work=work,
    )  # fmt: skip
    base.update(kw)
    return FleetSnapshot(**base)  # type: ignore[arg-type]


def _room(snap: FleetSnapshot) -> dict[int, float]:
    bidding = with_proven_room(snap, ROOMY).bidding
    return dict(bidding.room) if bidding is not None else {}


@pytest.mark.parametrize(
    ("record", "earns"),
    [
        ((3.0, 0.0, 0.0), True),  # delivered three jobs
        ((1.0, 1.0, 0.05), False),  # delivered no more than it failed
        (None, False),  # a stranger
    ],
)
def test_only_a_machine_that_delivered_more_than_it_failed_earns_room(record, earns):
    history = {} if record is None else {501: record}
    room = _room(_snap(history))
    assert (501 in room) is earns and 502 not in room


def test_the_room_stays_under_the_caps_and_off_leaves_the_usual_bid():
    snap = _snap({501: (3.0, 0.0, 0.0)})
    usual, _ = offer_bid(PROVEN, BIDDING)
    room = _room(snap)[501]
    assert usual is not None and room > usual
    assert room + 0.01 <= 0.5 and room <= 0.9 * 0.60  # max_dph with storage, on-demand share
    # under a cap of $0.15/h the stranger is rented on-demand, where `max_dph` lets it
    capped = _room(dataclasses.replace(snap, bidding=dataclasses.replace(BIDDING, cap=0.15),
                                       terms=OfferTerms(max_dph=1.0, image_cuda=12.4)))  # fmt: skip
    assert capped[501] == pytest.approx(0.15)
    assert with_proven_room(snap, DEFAULT) is snap  # `default`: the setting is off
    alone = dataclasses.replace(snap, offers=(PROVEN,))
    assert with_proven_room(alone, ROOMY) is alone  # nothing to replace it with
    on_demand = dataclasses.replace(snap, bidding=BidTerms("on-demand", "auto"))
    assert with_proven_room(on_demand, ROOMY) is on_demand


def test_decide_creates_the_proven_machine_at_its_room_and_the_preview_says_so():
    snap = _snap({501: (3.0, 0.0, 0.0)})
    room = _room(snap)[501]
    (made,) = [d for d in decide(snap, ROOMY, 1000.0) if isinstance(d, Create)]
    assert made.offer is not None and made.offer.machine_id == 501
    assert made.bid == pytest.approx(room) and "proven, dearer to replace" in made.why
    first = next(p for p in picks(snap, ROOMY, [made]) if p.first)
    assert first.bid == pytest.approx(room)
    (usual,) = [d for d in decide(snap, DEFAULT, 1000.0) if isinstance(d, Create)]
    assert usual.bid == offer_bid(PROVEN, BIDDING)[0]


def test_auto_keeps_the_usual_bid_where_the_raised_one_would_not_pay():
    # outbid five times an hour on record: a bid near on-demand costs more than on-demand
    fought = BidTerms("interruptible", "auto", exposure=((501, "RTX 5090", 4.0, 20),))
    raised = dataclasses.replace(fought, room=((501, 0.54),))
    usual, _ = offer_bid(PROVEN, fought)
    assert usual is not None and offer_bid(PROVEN, raised)[0] == usual


@pytest.mark.parametrize("value", [1.5, -0.1])
def test_the_share_is_checked(value):
    with pytest.raises(ConfigErrors):
        DEFAULT.with_overrides({"proven_bid_share": value})
