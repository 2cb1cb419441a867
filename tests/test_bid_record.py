"""The outbid rate the bids and `auto` read comes from the ledger, over every campaign: outbids
per hour a bid rental ran (paused hours are no exposure), per machine and model, read at the
start. A model the ledger saw outbid every few minutes is rented on-demand under `auto`."""

from __future__ import annotations

from typing import Any

import pytest
from rentwatch.core.bidding import tier as B
from rentwatch.core.decisions import Create
from rentwatch.core.policy import DEFAULT
from rentwatch.ledger import Ledger

from .ledgers import new_ledger
from .test_bid_engine import JOB, bid_market, key  # noqa: F401  (key: the module's fixture)
from .test_supervisor_unit import only, run


def seeded(outbids: int = 60, run_s: float = 240.0, paused_s: float = 1800.0) -> Ledger:
    """An older campaign's bid rental of an RTX 3090 (machine 30, not on offer now): it ran
    `run_s`, was outbid, paused `paused_s` and resumed, `outbids` times, then was destroyed;
    and an on-demand rental of the same model that was never outbid."""
    ledger = new_ledger()
    ctx: dict[str, Any] = dict(campaign="older", machine_id=30, gpu_name="RTX 3090")
    t = 1000.0
    ledger.record(
        "create", at=t, actor="rule:replace", reason="bid", ok=True, instance_id=301,
        detail={"bid": 0.11}, gpu_dph=0.11, **ctx,
    )  # fmt: skip
    for _ in range(outbids):
        t += run_s
        ledger.record("outbid", at=t, actor="market", reason="o", ok=True, instance_id=301, **ctx)
        t += paused_s
        ledger.record("resumed", at=t, actor="market", reason="r", ok=True, instance_id=301, **ctx)
    t += run_s
    ledger.record("destroy", at=t, actor="engine", reason="end", ok=True, instance_id=301, **ctx)
    ledger.record(
        "create", at=1000.0, actor="rule:replace", reason="od", ok=True, instance_id=302,
        gpu_dph=0.4, campaign="older", machine_id=31, gpu_name="RTX 3090",
    )  # fmt: skip
    ledger.record("destroy", at=9e4, actor="engine", reason="end", ok=True, instance_id=302)
    return ledger


def test_the_ledger_counts_outbids_per_hour_running_on_bid():
    (row,) = seeded().bid_exposure()  # the on-demand rental is no part of the tier's record
    machine, gpu, hours, outbids = row
    assert (machine, gpu, outbids) == (30, "RTX 3090", 60)
    assert hours == pytest.approx(61 * 240 / 3600)  # 30 paused hours left out


def test_auto_rents_on_demand_where_the_ledger_says_the_model_is_outbid_often(key):  # noqa: F811
    ledger = seeded()

    async def body(sup, market, led):
        rate = sup.tier.terms(market.t).rate(10, "RTX 3090")
        assert rate > 5  # the older campaign's record, read at the start
        (c,) = only(await sup.poll_once(), Create)
        assert c.bid is None and "on-demand" in c.why and "ledger" in c.why
        assert all(b.bid is None for b in market.boxes.values())

    run(key, body, market=bid_market(), policy=DEFAULT, ledger=ledger, rental="auto", jobs=(JOB,))


def test_auto_bids_where_the_record_is_calm_and_paused_hours_do_not_dilute_it(key):  # noqa: F811
    async def body(sup, market, led):
        (c,) = only(await sup.poll_once(), Create)
        assert c.bid is not None  # no record: the prior's rate, and a bid pays

    run(key, body, market=bid_market(), policy=DEFAULT, rental="auto", jobs=(JOB,))
    # counting the paused hours would read ~1.7 outbids/h; the running hours say ~10
    mine, model = B.exposure(seeded().bid_exposure(), 10, "RTX 3090")
    rate = B.outbid_rate(mine, model)
    ckpt = B.checkpoint_every_s(600, rate)
    bid = B.bid_for(0.10, 0.40, rate, None)
    assert bid is not None and not B.worth_bidding(bid, 0.40, rate, ckpt)
    diluted = B.outbid_rate(B.Exposure(), B.Exposure(model.hours + 30, model.outbids))
    assert diluted < 2 < 5 < rate


def test_a_job_costs_more_on_the_tier_as_outbids_come_faster():
    calm = B.tier_cost(2.0, 0.12, 0.40, 0.3, 600)
    fought = B.tier_cost(2.0, 0.12, 0.40, 6.0, 600)
    assert 0.24 < calm < fought and calm < 2.0 * 0.40 < fought
    assert B.tier_cost(2.0, 0.12, 0.40, 13.0, 600) == float("inf")  # no work survives
