"""[AC 3] The rental is what was asked: right after a create, the market's row of the rental
is read and its type (bid or on-demand) and price checked. A create without its bid price
rents on-demand and its answer does not say so (vast-cli SKILL.md, PR #403): the wrong type is
a `rental_mismatch` event, given up and replaced; a bid held at another price is bid again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rentwatch.core.bidding.rental_check import rental_mismatch, rented_bid
from rentwatch.core.decisions import Create
from rentwatch.core.models import Instance
from rentwatch.core.policy import DEFAULT
from rentwatch.engine.hosts.ssh import load_or_create_key
from rentwatch.market.vast.rows import parse_instance

from .test_bid_engine import JOB, bid_market
from .test_supervisor_unit import kinds, only, run

OFFER_DPH = 0.40  # the offer's on-demand price
BID = 0.15


def row(dph_base: float, is_bid: bool | None = None) -> Instance:
    data: dict[str, Any] = {"id": 7, "actual_status": "loading", "dph_base": dph_base}
    if is_bid is not None:
        data["is_bid"] = is_bid
    return parse_instance(data)


@pytest.mark.parametrize(
    "asked, inst, what, fix",
    [
        (BID, row(BID, True), None, None),
        (BID, row(BID), None, None),  # no is_bid: the price says it is the bid
        (None, row(OFFER_DPH, False), None, None),
        (None, row(OFFER_DPH), None, None),
        (BID, row(OFFER_DPH, False), "type", "replace"),
        (BID, row(OFFER_DPH), "type", "replace"),  # no is_bid: the on-demand price says it
        (None, row(OFFER_DPH, True), "type", "replace"),
        (BID, row(0.2, True), "price", "rebid"),
        (None, row(0.45), "price", "keep"),  # dearer than its offer, under the ceiling
        (None, row(0.60), "price", "replace"),  # over the campaign's $0.50/h ceiling
    ],
)
def test_the_type_and_price_are_checked(asked, inst, what, fix) -> None:
    miss = rental_mismatch(asked, OFFER_DPH, 0.50, inst)
    assert (miss.what if miss else None, miss.fix if miss else None) == (what, fix)


def test_a_bid_at_the_on_demand_price_cannot_be_told_by_price() -> None:
    assert rented_bid(OFFER_DPH, OFFER_DPH, row(OFFER_DPH)) is None
    assert rental_mismatch(OFFER_DPH, OFFER_DPH, 0.5, row(OFFER_DPH)) is None


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_or_create_key(tmp_path_factory.mktemp("k") / "key")


def test_a_bid_create_rented_on_demand_is_caught_and_replaced(key):
    async def body(sup, market, ledger):
        market.rents_on_demand = True
        (c,) = only(await sup.poll_once(), Create)
        assert c.bid is not None
        (box,) = market.boxes.values()
        (miss,) = kinds(ledger, "rental_mismatch")
        assert miss.instance_id == box.id and miss.ok is False
        assert (miss.detail["what"], miss.detail["fix"]) == ("type", "replace")
        assert miss.detail["asked_bid"] == c.bid and miss.detail["interruptible"] is False
        assert "on-demand" in miss.reason
        assert ("destroy_instance", box.id) in market.calls  # never proven: destroyed
        (gave_up,) = [e for e in kinds(ledger, "abandon") if e.instance_id == box.id]
        assert gave_up.detail["class"] == "cancelled"  # no fault of its host's
        assert box.id not in {a.instance_id for a in sup.fleet.held()}
        market.rents_on_demand = False
        market.t += 10
        await sup.poll_once()  # replaced, on the tier this time
        again = [b for b in market.boxes.values() if b.id != box.id]
        assert again and all(b.bid is not None for b in again)
        assert len(kinds(ledger, "rental_mismatch")) == 1
        assert ledger.receipt()[0]["duds"] == 0

    run(key, body, market=bid_market(), policy=DEFAULT, rental="interruptible", jobs=(JOB,))


def test_a_bid_held_at_another_price_is_bid_again(key):
    async def body(sup, market, ledger):
        market.holds_bid_at = 0.3
        (c,) = only(await sup.poll_once(), Create)
        (box,) = market.boxes.values()
        (miss,) = kinds(ledger, "rental_mismatch")
        assert (miss.detail["what"], miss.detail["fix"]) == ("price", "rebid")
        assert ("change_bid", (box.id, c.bid)) in market.calls and box.bid == c.bid
        assert box.id in {a.instance_id for a in sup.fleet.held()}  # kept

    run(key, body, market=bid_market(), policy=DEFAULT, rental="interruptible", jobs=(JOB,))


def test_the_simulator_says_the_type_and_its_knob_rents_a_bid_on_demand(make_sim):
    """The simulated market's row carries `is_bid` (a bid rental's `dph_base` is its bid), and
    `bid_rents_on_demand` answers a bid create with an on-demand rental."""
    from rentwatch.market.vast.client import VastClient

    async def rent(url: str, key: str) -> tuple[Instance, float, float]:
        async with VastClient(url, key, min_intervals={}) as c:
            o = next(o for o in await c.search_offers({}) if o.bid_floor)
            bid = round(max(o.bid_floor or 0.0, o.gpu_dph * 0.6) + 0.01, 4)
            res = await c.create_instance(o.id, image="img", disk_gb=10, price=bid)
            inst = await c.show_instance(res.instance_id)
            assert inst is not None
            return inst, bid, o.gpu_dph

    plain = make_sim(seed=3, offers=6, host_class=[{"behaviour": "healthy", "share": 1.0}])
    inst, bid, od = asyncio.run(rent(plain.url, plain.api_key))
    assert inst.interruptible is True and inst.gpu_dph == pytest.approx(bid)
    assert rental_mismatch(bid, od, 1.0, inst) is None
    knob = make_sim(
        seed=3,
        offers=6,
        host_class=[{"behaviour": "healthy", "share": 1.0}],
        bid_rents_on_demand=1.0,
    )
    inst, bid, od = asyncio.run(rent(knob.url, knob.api_key))
    assert inst.interruptible is False and inst.gpu_dph == pytest.approx(od)
    miss = rental_mismatch(bid, od, 1.0, inst)
    assert miss is not None and (miss.what, miss.fix) == ("type", "replace")
