"""The simulator's markets as the public evidence shows them (../shared/MARKET_EVIDENCE.md):
listings taken and relisted under another id (`[churn]`), deverified machines (`[listing]`),
hosts whose floor sits near on-demand and pay-as-bid or clearing prices (`[bids]`), bimodal
lines, a listed reliability that says more or less, storage spread over three decades
(`[hosts]`). The defaults leave the market as it was."""

from __future__ import annotations

import statistics

import httpx
import pytest
from rentwatch.core.errors import ConfigError
from rentwatch.sim import bids, churn
from rentwatch.sim.market import SimClock, SimMarket
from rentwatch.sim.scenario import DELIVERING, parse_scenario

HEALTHY = [{"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "dph": [0.3, 0.4]}]
MIXED = [
    {"behaviour": "healthy", "share": 0.5, "gpu": ["RTX 4090"], "dph": [0.3, 0.4]},
    {"behaviour": "freeze_pull", "share": 0.5, "gpu": ["RTX 4090"], "dph": [0.3, 0.4]},
]
AUTH = {"Authorization": "Bearer test-key"}
T0 = 1_764_400_000.0
CHURN = {"presence": [0.03, 1.0], "window_min": 30, "relist_new_id": True}


def _market(**kw) -> SimMarket:
    sc = parse_scenario({"host_class": HEALTHY, **kw})
    return SimMarket(sc, SimClock(sc.time_scale, origin=T0), api_key="k")


def test_without_the_new_tables_a_market_is_as_it_was():
    plain = _market(offers=40, seed=3)
    again = _market(offers=40, seed=3, churn={}, hosts={}, listing={"deverified": 0.0})
    moving = {"duration", "end_date"}  # the listing's end, from the clock at the build

    def rows(mk: SimMarket) -> list[dict[str, object]]:
        return [
            {
                k: v
                for k, v in m.offer_json(10, T0, mk.min_bid(m, T0), m.offer_id).items()
                if k not in moving
            }
            for m in mk.machines + mk.others
        ]

    assert rows(plain) == rows(again)
    assert all(plain.listed(m, T0 + k * 1800) for m in plain.machines for k in range(20))
    assert (
        len(plain.offers(plain.clock.now())) == 40 + 12
    )  # the verified 40, unverified 8 and external 4


def test_machines_come_and_go_and_the_median_one_is_listed_a_sixth_of_the_time():
    mk = _market(offers=300, churn=CHURN, listing={"unverified": 0, "external": 0})
    day = [
        churn.listed_share(mk.scenario.seed, mk.scenario.churn, m, T0, T0 + 86400)
        for m in mk.machines
    ]
    # log-uniform over [0.03, 1]: the median at sqrt(0.03) = 0.17 (the scraper's 17%)
    assert 0.11 <= statistics.median(day) <= 0.25
    assert sum(d > 0.9 for d in day) > 0 and sum(d < 0.1 for d in day) > 60
    listed_now = {m.id for m in mk.offers(mk.clock.now())}
    assert 0 < len(listed_now) < 200  # about a quarter at once, not all
    assert {m.id for m in mk.machines if mk.listed(m, T0 + 6 * 3600)} != listed_now


def test_a_relisted_machine_carries_another_id_and_a_create_on_the_old_one_finds_nothing(
    make_sim,
):
    sim = make_sim(offers=120, time_scale=1, pacing=False, host_class=HEALTHY, churn=CHURN)
    mk = sim.market
    sc = mk.scenario
    now = mk.clock.now()
    # a machine listed now whose id changes at a later listing
    w = sc.churn.window_min * 60
    pick = None
    for m in mk.offers(mk.clock.now()):
        oid = mk.offer_id(m, now)
        for k in range(1, 400):
            t = now + k * w
            if mk.listed(m, t) and mk.offer_id(m, t) != oid:
                pick = (m, oid, t)
                break
        if pick:
            break
    assert pick is not None
    m, old_id, later = pick
    ids = {
        o["id"]
        for o in httpx.post(f"{sim.url}/api/v0/bundles/", json={}, headers=AUTH).json()["offers"]
    }
    assert old_id in ids and all(mk.by_offer[i].id != m.id for i in ids - {old_id})
    sim.call(lambda: mk.clock.advance(later - mk.clock.now() + 1))
    offers = httpx.post(f"{sim.url}/api/v0/bundles/", json={}, headers=AUTH).json()["offers"]
    new_id = next(o["id"] for o in offers if o["machine_id"] == m.id)
    assert new_id != old_id
    stale = httpx.put(f"{sim.url}/api/v0/asks/{old_id}/", json={"image": "img"}, headers=AUTH)
    assert stale.status_code == 404 and "no_such_ask" in stale.json()["msg"]
    ok = httpx.put(f"{sim.url}/api/v0/asks/{new_id}/", json={"image": "img"}, headers=AUTH)
    assert ok.json()["success"] is True
    [row] = [r for r in sim.call(mk.truth)["instances"] if r["id"] == ok.json()["new_contract"]]
    assert row["offer_id"] == new_id  # the listing rented, not the machine's first id
    # a machine not listed now: gone from the search, and a create on its id finds nothing
    gone = next(x for x in mk.machines if not mk.listed(x, mk.clock.now()) and x.id != m.id)
    assert gone.id not in {o["machine_id"] for o in offers}
    for oid in churn.offer_ids(gone):
        r = httpx.put(f"{sim.url}/api/v0/asks/{oid}/", json={"image": "img"}, headers=AUTH)
        assert r.status_code == 404 and "no_such_ask" in r.json()["msg"]


def test_deverified_offers_say_so_and_the_default_search_leaves_them_out(make_sim):
    sim = make_sim(
        offers=20,
        time_scale=1,
        pacing=False,
        host_class=HEALTHY,
        listing={"unverified": 0.4, "deverified": 0.5, "external": 0.0},
    )
    every = httpx.post(f"{sim.url}/api/v0/bundles/", json={}, headers=AUTH).json()["offers"]
    kinds = [o["verification"] for o in every]
    assert (kinds.count("verified"), kinds.count("deverified"), kinds.count("unverified")) == (
        20,
        10,
        8,
    )
    assert all(o["verified"] is (o["verification"] == "verified") for o in every)
    q = {"verified": {"eq": True}}  # the official CLI's default
    default = httpx.post(f"{sim.url}/api/v0/bundles/", json=q, headers=AUTH).json()["offers"]
    assert {o["verification"] for o in default} == {"verified"}


def test_floors_near_on_demand_and_a_bid_above_it_is_still_listed(make_sim):
    near_bids = {"near_share": 0.5, "near": [0.9, 1.0], "pressure": 0.0, "drift": 0.0}
    mk = _market(offers=200, bids=near_bids)
    sc = mk.scenario
    shares = [bids.floor_at(sc.seed, sc.bids, m, T0) / m.dph_base for m in mk.machines]
    near = sum(s >= 0.9 - 1e-9 for s in shares) / len(shares)
    assert 0.35 <= near <= 0.65  # half the hosts; the rest the discount tail
    assert min(shares) < 0.6
    # a rival bidding over the on-demand price: the bid search still lists the machine, at it
    sim = make_sim(
        offers=30,
        time_scale=1,
        pacing=False,
        host_class=HEALTHY,
        bids={
            "near_share": 1.0,
            "near": [1.0, 1.0],
            "drift": 0.0,
            "pressure": 60.0,
            "ondemand": 0.0,
            "rival_bid": [1.5, 2.0],
        },
    )
    q = {"type": "bid"}
    spot = httpx.post(f"{sim.url}/api/v0/bundles/", json=q, headers=AUTH).json()["offers"]
    assert any(o["min_bid"] > o["dph_base"] for o in spot)


def test_a_machine_a_rival_holds_on_demand_is_left_out_of_the_bid_search_only(make_sim):
    sim = make_sim(
        offers=30,
        time_scale=1,
        pacing=False,
        host_class=HEALTHY,
        bids={"pressure": 60.0, "ondemand": 1.0},
    )
    plain = httpx.post(f"{sim.url}/api/v0/bundles/", json={}, headers=AUTH).json()["offers"]
    spot = httpx.post(f"{sim.url}/api/v0/bundles/", json={"type": "bid"}, headers=AUTH).json()
    held = {o["machine_id"] for o in plain} - {o["machine_id"] for o in spot["offers"]}
    assert held
    mk = sim.market
    assert all(
        mk.bid_quote(mk.by_offer[o["id"]], mk.clock.now()) is None
        for o in plain
        if o["machine_id"] in held
    )


def _billed(pricing: str) -> tuple[float, float, float]:
    mk = _market(offers=10, bids={"pressure": 0.0, "drift": 0.0, "pricing": pricing})
    m = mk.machines[0]
    floor = mk.min_bid(m, T0)
    inst = mk.create(m.offer_id, "img", 10, None, {}, None, price=round(floor * 1.5, 4))
    end = T0 + 6 * 3600
    mk.clock.advance(end - mk.clock.now())
    mk.market_stops(end)
    seg = inst.segments[-1]
    assert seg.running_at is not None
    return inst.charges(end, "running").gpu_usd, (end - seg.running_at) / 3600, floor


def test_clearing_prices_pay_what_the_bid_had_to_beat_pay_as_bid_pays_the_bid():
    paid_bid, hours, floor = _billed("bid")
    paid_clearing, hours2, _ = _billed("clearing")
    assert paid_bid == pytest.approx(hours * round(floor * 1.5, 4), rel=1e-6)
    assert paid_clearing == pytest.approx(hours2 * floor, rel=1e-3)
    with pytest.raises(ConfigError):
        parse_scenario({"bids": {"pricing": "second-price"}})


def test_listed_reliability_tells_duds_apart_as_far_as_the_knob_says():
    def gap(signal: float | None) -> float:
        hosts = {} if signal is None else {"reliability_signal": signal}
        mk = _market(offers=300, host_class=MIXED, hosts=hosts)
        good = [m.reliability for m in mk.machines if m.behaviour in DELIVERING]
        bad = [m.reliability for m in mk.machines if m.behaviour not in DELIVERING]
        return statistics.mean(good) - statistics.mean(bad)

    assert abs(gap(None)) < 0.01 and abs(gap(0.0)) < 0.01
    assert gap(0.5) > 0.03 and gap(1.0) > gap(0.5)


def test_lines_are_bimodal_and_storage_spreads_over_decades():
    mk = _market(
        offers=300,
        storage_cost=[0.001, 0.93],
        hosts={"inet_fast_share": 0.3, "storage_spread": "log"},
    )
    downs = [m.inet_down for m in mk.machines]
    fast = sum(d >= 1500 for d in downs) / len(downs)
    assert 0.2 <= fast <= 0.4
    assert not any(700 < d < 1500 for d in downs)  # two modes, nothing between
    storage = [m.storage_cost for m in mk.machines]
    assert min(storage) < 0.003 and max(storage) > 0.6
    assert statistics.median(storage) < 0.1  # log-uniform: the median near the geometric mean
    with pytest.raises(ConfigError):
        parse_scenario({"hosts": {"storage_spread": "log"}, "storage_cost": [0.0, 0.9]})
    with pytest.raises(ConfigError):
        parse_scenario({"churn": {"presence": [0.0, 1.0]}})
    with pytest.raises(ConfigError):
        parse_scenario({"churn": {"relist": True}})


def test_the_engine_fills_its_fleet_on_a_market_that_churns(make_sim, tmp_path):
    """Listings come and go every market minute and come back under other ids: a create on a
    listing gone since the search is refused as Vast refuses it, and the engine takes another
    offer, blaming no host for it."""
    from rentwatch.ledger import Ledger

    from tests.campaigns import run_campaign

    fast = {"presence": [0.3, 0.6], "window_min": 1, "relist_new_id": True}
    sim = make_sim(seed=8, offers=40, time_scale=300, host_class=HEALTHY, churn=fast)
    code, path = run_campaign(sim, tmp_path, fleet=2)
    assert code == 0
    led = Ledger(path, read_only=True)
    refused = led.events(where="kind = 'create' AND phase <> 'intent' AND NOT ok")
    blamed = led.events(where="kind IN ('quarantine', 'abandon')")
    rented = {r["machine_id"] for r in led.instance_rows()}
    led.close()
    assert all("no_such_ask" in str(e.detail) + e.reason for e in refused)
    # a refusal is no evidence against the machine: nothing blamed for it (a machine rented
    # later and found dead is blamed for that rental, which a loaded box may bring about)
    gone = {e.machine_id for e in refused}
    assert not any("no_such_ask" in str(e.detail) + e.reason for e in blamed)
    assert all(e.machine_id in rented for e in blamed if e.machine_id in gone)


def test_a_listing_keeps_its_id_as_long_as_it_lasts():
    mk = _market(
        offers=200, churn={"presence": [0.5, 1.0], "window_min": 15, "relist_new_id": True}
    )
    sc = mk.scenario
    w = sc.churn.window_min * 60
    k0 = churn.window(sc.churn, T0)
    for m in mk.machines:
        run: set[int] = set()
        for k in range(k0, k0 + 300):  # 75 hours: past the walk back of long listings
            if mk.listed(m, k * w):
                run.add(mk.offer_id(m, k * w))
            else:
                assert len(run) <= 1, m.id  # one id per listing, however long it lasts
                run = set()
        assert len(run) <= 1
