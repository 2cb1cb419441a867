"""Bids on machines of several GPUs. Vast rents an offer whole and prices it per machine: its
`dph_total` and `min_bid` are the machine's, and so is a bid ("per machine bid price in $/hour",
the CLI's `--bid_price` and `change bid --price`), capped at $32/h per GPU (`change_bid.yaml`:
"<= 32.0 * number of GPUs"). A change of bid with no price bids "a winning bid price". The
simulator lists multi-GPU machines on `[hosts] multi_gpu_share`."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from rentwatch.core.bidding.rules import BidTerms, as_rented, offer_bid
from rentwatch.core.errors import ConfigError
from rentwatch.core.models import Offer
from rentwatch.ledger import Ledger
from rentwatch.market.errors import ApiError
from rentwatch.market.factory import load_campaign
from rentwatch.market.vast.client import VastClient
from rentwatch.market.vast.rows import parse_offer

from .campaigns import campaign_text, checkpointing_jobs, run_headless_text
from .test_vastai_cli import vastai

RTX3090 = [{"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 3090"], "dph": [0.15, 0.2]}]
AUTH = {"Authorization": "Bearer test-key"}
TERMS = BidTerms(tier="interruptible", rental="interruptible")


def _two_gpu_offer() -> Offer:
    # a 2x RTX 3090 at $0.165 per GPU on demand (MARKET_EVIDENCE.md), listed per machine by
    # a bid search (`dph_total` = min_bid + storage)
    return parse_offer(
        {
            "id": 7,
            "machine_id": 70,
            "gpu_name": "RTX 3090",
            "num_gpus": 2,
            "dph_base": 0.33,
            "dph_total": 0.21,
            "min_bid": 0.2,
        }
    )


def test_a_bid_on_a_two_gpu_offer_is_the_machines_price():
    o = _two_gpu_offer()
    bid, why = offer_bid(o, TERMS)
    # the machine's min_bid and headroom: a per-GPU bid (half of it) would lose the machine
    assert bid is not None and o.bid_floor is not None
    assert o.bid_floor <= bid < o.gpu_dph, why
    [priced] = as_rented([o], TERMS) or ()
    assert priced.dph_total == pytest.approx(bid + 0.01)  # the bid and the machine's storage


def test_a_two_gpu_machine_is_bid_on_whole_capped_per_gpu_and_rebid_without_a_price(
    make_sim, tmp_path
):
    sim = make_sim(
        seed=4,
        offers=8,
        time_scale=1,
        host_class=RTX3090,
        pacing=False,
        bids={"pressure": 0.0},
        hosts={"multi_gpu_share": 1.0},
    )

    async def run() -> int:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            spot = await c.search_offers({}, rental="interruptible")
            assert spot and {o.num_gpus for o in spot} <= {2, 4, 8}
            o = next(o for o in spot if o.num_gpus == 2)
            # listed per machine: the host class's per-GPU price, twice
            assert 0.3 - 1e-9 <= o.gpu_dph <= 0.4 + 1e-9
            bid, why = offer_bid(o, TERMS)
            assert bid is not None and o.bid_floor is not None and bid >= o.bid_floor, why
            made = await c.create_instance(o.id, image="img", disk_gb=10, price=bid)
            assert made.refused is None  # the machine's price wins the machine
            inst = await c.show_instance(made.instance_id)
            assert inst is not None and inst.num_gpus == 2 and not inst.market_stopped
            assert inst.gpu_dph == pytest.approx(bid)
            # over $32/h, under 32 x 2: a bid the API takes on two GPUs
            await c.change_bid(made.instance_id, 40.0, num_gpus=2)
            with pytest.raises(ValueError, match="0.001-64"):
                await c.change_bid(made.instance_id, 65.0, num_gpus=2)
            with pytest.raises(ValueError, match="0.001-32"):
                await c.change_bid(made.instance_id, 40.0)  # one GPU's cap
            # no price: "a winning bid price", the machine's min_bid now
            await c.change_bid(made.instance_id, None, num_gpus=2)
            return made.instance_id

    iid = asyncio.run(run())
    inst = sim.market.instances[iid]
    assert inst.bid == pytest.approx(
        sim.call(lambda: sim.market.min_bid(inst.machine, sim.market.clock.now())), abs=1e-3
    )
    assert inst.prices[1][1] == pytest.approx(40.0)
    over = httpx.put(
        f"{sim.url}/api/v0/instances/bid_price/{iid}/",
        json={"client_id": "me", "price": 64.5},
        headers=AUTH,
    )
    assert over.status_code == 400 and "64" in over.json()["msg"]
    # the official CLI with no --price sends a null price: taken (it prints "Per gpu", though
    # the price it changes is the machine's)
    out = vastai(sim, "change", "bid", str(iid), tmp_path=tmp_path)
    assert "bid price changed" in out, out
    assert len(inst.prices) == 4


def test_a_one_gpu_machine_caps_a_bid_at_32(make_sim):
    sim = make_sim(seed=4, offers=3, time_scale=1, host_class=RTX3090, pacing=False)

    async def run() -> None:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            [o, *_] = await c.search_offers({}, rental="interruptible")
            assert o.num_gpus == 1
            with pytest.raises(ApiError, match="32"):
                await c.create_instance(o.id, image="img", disk_gb=10, price=33.0)

    asyncio.run(run())


def test_a_campaigns_bid_cap_is_per_machine_up_to_an_8_gpu_machines():
    # $40/h is a bid only a machine of 2+ GPUs takes; 32 x 8 is the most any machine takes
    c = load_campaign(campaign_text(extra="max_bid_dph = 40.0\n"))
    assert c.max_bid_dph == 40.0
    with pytest.raises(ConfigError, match="max_bid_dph"):
        load_campaign(campaign_text(extra="max_bid_dph = 300.0\n"))


TWO_GPU_CAMPAIGN = """
name = "two"
image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
image_cuda = "12.4"
disk_gb = 40
offer_query = "num_gpus=2 rentable=true"
max_dph = 1.0
fleet = 2
max_creates = 20
budget_usd = 20.0
artifacts_dir = "artifacts"
rental = "interruptible"
"""


def test_a_bid_campaign_on_two_gpu_machines_rents_them_at_the_machines_bid(
    make_sim, tmp_path, monkeypatch
):
    """The whole engine on a market of multi-GPU machines: each create bids the machine's
    price (at or over its `min_bid`, which a per-GPU bid would lose), and the jobs finish."""
    monkeypatch.chdir(tmp_path)
    sim = make_sim(  # stepped: a loaded box's slow boots met the market's bid rises first
        stepped=True,
        seed=5,
        offers=16,
        host_class=RTX3090,
        bids={"pressure": 0.0},
        hosts={"multi_gpu_share": 1.0},
    )
    # jobs of 9 market minutes: each market minute played costs CPU, and what is checked is
    # the bids the creates made and that both jobs finished
    text = TWO_GPU_CAMPAIGN + checkpointing_jobs(2, every_min=30, retries=2, ref_hours=0.15)
    code, path = run_headless_text(sim, tmp_path, text)
    assert code == 0
    led = Ledger(path)
    creates = led.events(where="kind = 'create' AND ok")
    assert creates
    for e in creates:
        assert e.detail["bid"] >= e.detail["bid_floor"] > 0, e.detail
    done = {e.detail["job"] for e in led.events(where="kind = 'job_finished' AND ok")}
    assert done == {"j0", "j1"}
    rented = [i for i in sim.market.instances.values()]
    assert rented and all(i.machine.num_gpus == 2 and i.bid is not None for i in rented)
    assert not any(i.lost_bids for i in rented)  # no create's bid lost the machine
