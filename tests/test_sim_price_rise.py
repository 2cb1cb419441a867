"""The simulator's hosts raise their price under a held rental through Vast's pending flow
(vast-cli PR #401): a pending row until the contract's end date, then the new price where the
renter accepted it, or the contract's end (the market's stop) where it did not; the official
`vastai` CLI lists, accepts and rejects on the same routes."""

from __future__ import annotations

import json

import pytest
from rentwatch.core.errors import ConfigError
from rentwatch.market.vast.price_increases import read_row
from rentwatch.sim.market import SimClock, SimMarket
from rentwatch.sim.scenario import parse_scenario

from tests.test_vastai_cli import pytestmark as needs_cli
from tests.test_vastai_cli import vastai

HEALTHY = [{"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "dph": [0.3, 0.4]}]
RISE = {"share": 1.0, "factor": [1.5, 1.5], "after_min": [10, 10], "notice_min": [30, 30]}


def _market(**rise) -> SimMarket:
    sc = parse_scenario(
        {"host_class": HEALTHY, "offers": 4, "price_rise": {**RISE, **rise}, "states": {}}
    )
    return SimMarket(sc, SimClock(sc.time_scale, origin=1_764_400_000.0), api_key="k")


def _rent(mk: SimMarket):
    m = mk.machines[0]
    return mk.create(m.offer_id, "img", 10.0, "l", {}, None)


def test_a_rise_is_pending_until_the_contract_end_then_applies_when_accepted():
    mk = _market()
    inst = _rent(mk)
    old, t0 = inst.gpu_dph, inst.created_at
    mk.clock.advance(9 * 60)
    mk.market_stops(mk.clock.now())
    assert mk.rises.pending_for([inst]) == []  # not yet raised
    mk.clock.advance(2 * 60)
    mk.market_stops(mk.clock.now())
    (row,) = mk.rises.pending_for([inst])
    assert row.contract_end == pytest.approx(t0 + 40 * 60)
    assert row.new_dph == pytest.approx(old * 1.5, rel=1e-4)
    assert mk.rises.answer(row.id, accept=True) is row
    mk.clock.advance(30 * 60)  # past the end date
    mk.market_stops(mk.clock.now())
    assert inst.gpu_dph == pytest.approx(row.new_dph)  # the row's dph_base reads it
    assert inst.segments[-1].end is None  # still held: the contract runs on
    assert inst.machine.contract_end == row.ask_end
    # billed at the old price up to the end date, at the new one after it
    runs = inst.segments[0].running_at
    now = mk.clock.now()
    want = old * (row.contract_end - runs) / 3600 + row.new_dph * (now - row.contract_end) / 3600
    assert inst.charges(now, "running").gpu_usd == pytest.approx(want, rel=1e-6)
    assert mk.rises.answer(row.id, accept=True) is None  # no longer pending


@pytest.mark.parametrize("answer", ["reject", "none"])
def test_a_rise_rejected_or_unanswered_ends_the_contract_at_its_end_date(answer):
    mk = _market()
    inst = _rent(mk)
    old = inst.gpu_dph
    mk.clock.advance(11 * 60)
    mk.market_stops(mk.clock.now())
    (row,) = mk.rises.pending_for([inst])
    if answer == "reject":
        assert mk.rises.answer(row.id, accept=False) is row
        assert mk.rises.pending_for([inst]) == []
    mk.clock.advance(40 * 60)
    mk.market_stops(mk.clock.now())
    assert inst.gpu_dph == old  # never billed at the new price
    assert inst.market_stop_at == pytest.approx(row.contract_end)
    assert inst.status(mk.clock.now())[0] == "stopped"


def test_keep_old_runs_the_contract_on_at_the_old_price():
    mk = _market(keep_old=1.0)
    inst = _rent(mk)
    mk.clock.advance(11 * 60)
    mk.market_stops(mk.clock.now())
    (row,) = mk.rises.pending_for([inst])
    mk.rises.answer(row.id, accept=False)
    mk.clock.advance(40 * 60)
    mk.market_stops(mk.clock.now())
    assert inst.market_stop_at is None and inst.gpu_dph == row.old_dph


def test_bid_rentals_and_a_zero_share_see_no_rise():
    mk = _market(share=0.0)
    _rent(mk)
    mk.clock.advance(3 * 3600)
    mk.market_stops(mk.clock.now())
    assert mk.rises.rows == {}
    mk = _market()
    m = mk.machines[1]
    bid = mk.create(m.offer_id, "img", 10.0, "l", {}, None, price=m.dph_base)
    mk.clock.advance(3 * 3600)
    mk.market_stops(mk.clock.now())
    assert mk.rises.pending_for([bid]) == []


@pytest.mark.parametrize(
    "table",
    [
        {"share": 2},
        {"factor": [0.5, 1.2]},
        {"notice_min": [30]},
        {"keep_old": True},
        {"rise": 1},
    ],
)
def test_bad_tables_are_refused(table):
    with pytest.raises(ConfigError, match="price_rise"):
        parse_scenario({"price_rise": table})


@needs_cli
def test_the_official_cli_lists_accepts_and_rejects(make_sim, tmp_path):
    sim = make_sim(
        time_scale=1, offers=4, seed=5, host_class=HEALTHY, price_rise=RISE, pacing=False
    )
    mk = sim.market
    a, b = (mk.create(m.offer_id, "img", 10.0, "l", {}, None) for m in mk.machines[:2])
    mk.clock.advance(11 * 60)
    raw = json.loads(vastai(sim, "show", "pending-price-increases", "--raw", tmp_path=tmp_path))
    rows = raw["pending_price_increases"]
    assert raw["count"] == 2 and {r["contract_id"] for r in rows} == {a.id, b.id}
    assert all(r["new_gpu_costpersec"] > r["old_gpu_costpersec"] for r in rows)
    assert all(r["new_disk_ram_costpersec"] is None for r in rows)
    table = vastai(sim, "show", "pending-price-increases", tmp_path=tmp_path)
    assert str(a.id) in table and "->" in table
    out = vastai(sim, "accept", "price-increase", str(a.id), "--yes", tmp_path=tmp_path)
    assert f"Accepted price increase for 1 instance(s): {a.id}" in out, out
    out = vastai(sim, "reject", "price-increase", str(b.id), "--yes", tmp_path=tmp_path)
    assert f"Rejected price increase for 1 instance(s): {b.id}" in out, out
    assert "No pending price increases." in vastai(
        sim, "show", "pending-price-increases", tmp_path=tmp_path
    )
    # a second answer finds the row stale, as the CLI reads a 404 no_pending_price_increase
    out = vastai(sim, "accept", "price-increase", str(a.id), "--yes", tmp_path=tmp_path)
    assert "no longer available" in out
    statuses = {p.instance.id: p.status for p in mk.rises.rows.values()}
    assert statuses == {a.id: "accepted", b.id: "rejected"}


async def test_the_routes_refuse_a_body_other_than_the_pending_id(make_sim):
    import httpx

    sim = make_sim(time_scale=1, offers=4, seed=5, host_class=HEALTHY, price_rise=RISE)
    inst = sim.market.create(sim.market.machines[0].offer_id, "img", 10.0, "l", {}, None)
    sim.market.clock.advance(11 * 60)
    sim.market.market_stops(sim.market.clock.now())
    (row,) = sim.market.rises.pending_for([inst])
    url = f"{sim.url}/api/v0/instances/accept-price-increase/"
    auth = {"Authorization": f"Bearer {sim.api_key}"}
    async with httpx.AsyncClient() as c:
        for body in (
            {"pending_price_increase_id": row.id, "instance_ids": [inst.id]},
            {"pending_price_increase_id": str(row.id)},
            {},
        ):
            r = await c.put(url, json=body, headers=auth)
            assert r.status_code == 400, body
        r = await c.put(url, json={"pending_price_increase_id": 999}, headers=auth)
        assert r.status_code == 404 and r.json()["error"] == "no_pending_price_increase"


def test_the_listing_runs_on_for_the_next_renter_once_the_ended_rental_is_gone():
    mk = _market()
    inst = _rent(mk)
    mk.clock.advance(11 * 60)
    mk.market_stops(mk.clock.now())
    (row,) = mk.rises.pending_for([inst])
    mk.rises.answer(row.id, accept=False)
    mk.clock.advance(40 * 60)
    mk.market_stops(mk.clock.now())
    assert inst.machine.contract_end == row.contract_end  # the held contract ended there
    mk.destroy(inst)
    mk.market_stops(mk.clock.now())
    assert inst.machine.contract_end == row.ask_end
    again = mk.create(inst.machine.offer_id, "img", 10.0, "l", {}, None)
    mk.clock.advance(60)
    mk.market_stops(mk.clock.now())
    assert again.market_stop_at is None  # not stopped at once by the old contract's end


@needs_cli
def test_a_test_can_raise_one_rentals_price_now(make_sim, tmp_path):
    import httpx

    sim = make_sim(time_scale=1, offers=4, seed=5, host_class=HEALTHY, pacing=False)
    mk = sim.market
    inst = sim.call(lambda: mk.create(mk.machines[0].offer_id, "img", 10.0, "l", {}, None))
    url = f"{sim.url}/sim/v0/price_rise"
    for bad in ({"instance_id": inst.id, "factor": 0.9, "notice_min": 30}, {"instance_id": 1}):
        assert httpx.post(url, json=bad).status_code in (400, 404)
    r = httpx.post(url, json={"instance_id": inst.id, "factor": 2.0, "notice_min": 30})
    assert r.status_code == 200
    row = r.json()
    assert row["contract_id"] == inst.id
    assert row["new_gpu_costpersec"] == pytest.approx(2 * row["old_gpu_costpersec"], rel=1e-4)
    again = httpx.post(url, json={"instance_id": inst.id, "factor": 3.0, "notice_min": 30})
    assert again.status_code == 409  # one rise pending at a time
    raw = json.loads(vastai(sim, "show", "pending-price-increases", "--raw", tmp_path=tmp_path))
    assert [r["contract_id"] for r in raw["pending_price_increases"]] == [inst.id]


def test_a_multi_gpu_machines_pending_row_prices_each_gpu():
    """Vast's row gives per-GPU prices ("$/GPU/hr" in the CLI); a rented machine's price is all
    its GPUs', so the row divides it by the machine's count, and the client's reading of the
    row times that count is the machine's price again."""
    sc = parse_scenario(
        {
            "host_class": HEALTHY,
            "offers": 8,
            "price_rise": RISE,
            "hosts": {"multi_gpu_share": 1.0},
            "states": {},
        }
    )
    mk = SimMarket(sc, SimClock(sc.time_scale, origin=1_764_400_000.0), api_key="k")
    m = next(m for m in mk.machines if m.num_gpus > 1)
    inst = mk.create(m.offer_id, "img", 10.0, "l", {}, None)
    mk.clock.advance(11 * 60)
    mk.market_stops(mk.clock.now())
    (p,) = mk.rises.pending_for([inst])
    row = p.row()
    per_gpu_old = row["old_gpu_costpersec"] * 3600
    assert 0.3 - 1e-9 <= per_gpu_old <= 0.4 + 1e-9  # the host class's per-GPU price
    assert per_gpu_old * m.num_gpus == pytest.approx(p.old_dph)
    assert row["new_gpu_costpersec"] * 3600 * m.num_gpus == pytest.approx(p.new_dph)
    inc = read_row(row)  # per GPU, as the client reads any row; the engine scales by the count
    assert inc.new_gpu_dph is not None and inc.old_gpu_dph is not None
    assert inc.new_gpu_dph * m.num_gpus == pytest.approx(p.new_dph)
    assert inc.old_gpu_dph * m.num_gpus == pytest.approx(inst.gpu_dph)
