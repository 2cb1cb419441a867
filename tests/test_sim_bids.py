"""The simulator's interruptible tier: min_bid moves, rivals outbid and leave, an outbid rental
stops (its processes killed, its data kept) and resumes by itself, billing at the bid while it
runs and its storage always; a bid too low creates a stopped instance with an error that still
names it; the bid changes by `PUT /api/v0/instances/bid_price/{id}/`."""

from __future__ import annotations

import asyncio

import asyncssh
import httpx
import pytest
from rentwatch.core.errors import ConfigError
from rentwatch.sim import bids
from rentwatch.sim.market import SimClock, SimMarket
from rentwatch.sim.scenario import parse_scenario

HEALTHY = [{"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "dph": [0.3, 0.4]}]
AUTH = {"Authorization": "Bearer test-key"}


def _market(**kw) -> SimMarket:
    sc = parse_scenario({"host_class": HEALTHY, **kw})
    return SimMarket(sc, SimClock(sc.time_scale, origin=1_764_400_000.0), api_key="k")


def test_min_bid_moves_and_is_under_on_demand():
    mk = _market(offers=10, bids={"pressure": 0.0, "drift": 0.3})
    m = mk.machines[0]
    t0 = mk.clock.now()
    seen = {mk.min_bid(m, t0 + h * 900) for h in range(40)}
    assert len(seen) > 10  # it moves, window by window
    assert all(0 < b < m.dph_base for b in seen)


def test_pressure_per_model_and_over_the_day():
    b = parse_scenario({"bids": {"gpu_pressure": {"RTX 4090": 3.0}, "day_swing": 0.8}}).bids
    day = 1_764_374_400.0  # a UTC midnight
    assert bids.pressure_at(b, "RTX 4090", day + 15 * 3600) > 5.0
    assert bids.pressure_at(b, "RTX 4090", day + 3 * 3600) < 1.0
    assert bids.pressure_at(b, "RTX 3060", day + 15 * 3600) < 1.0  # the default 0.5, swung
    with pytest.raises(ConfigError):
        parse_scenario({"bids": {"pressur": 1.0}})
    with pytest.raises(ConfigError):
        parse_scenario({"bids": {"floor": [0.6, 0.2]}})


def test_outbid_stops_and_resumes_by_itself_billing_at_the_bid():
    mk = _market(offers=10, bids={"pressure": 3.0, "ondemand": 0.3})
    m = mk.machines[0]
    now = mk.clock.now()
    price = mk.min_bid(m, now) * 1.02
    inst = mk.create(m.offer_id, "img", 10, None, {}, None, price=price)
    assert inst.paused_at is None and inst.gpu_dph == price
    for _ in range(48):
        mk.clock.advance(900)
        mk.market_stops(mk.clock.now())
    assert inst.outbids and inst.resumes
    assert inst.resumes[0] > inst.outbids[0]
    # each outbid ended a boot, each resume began one: GPU billed only while running, at the bid
    assert len(inst.segments) == 1 + len(inst.resumes)
    end = mk.clock.now()
    c = inst.charges(end, "running")
    ran = sum(
        (min(s.end or end, end) - s.running_at) / 3600
        for s in inst.segments
        if s.running_at is not None and s.running_at < (s.end or end)
    )
    assert c.gpu_usd == pytest.approx(ran * price, rel=1e-6)
    assert c.storage_usd == pytest.approx(inst.storage_dph * (end - inst.created_at) / 3600)
    row = next(r for r in mk.truth()["instances"] if r["id"] == inst.id)
    assert row["bid"] == price and row["outbid_at"] == inst.outbids


def test_a_renters_stop_is_never_resumed_and_on_demand_is_never_outbid():
    mk = _market(offers=10, bids={"pressure": 6.0})
    a, b = mk.machines[0], mk.machines[1]
    bid = mk.create(a.offer_id, "img", 10, None, {}, None, price=mk.min_bid(a, mk.clock.now()))
    od = mk.create(b.offer_id, "img", 10, None, {}, None)
    mk.stop(bid)
    bid.paused_at = None  # what the API's stop does
    for _ in range(48):
        mk.clock.advance(900)
        mk.market_stops(mk.clock.now())
    assert bid.resumes == [] and len(bid.segments) == 1
    assert od.outbids == [] and od.segments[-1].end is None


def test_bid_api_search_create_too_low_and_change(make_sim):
    sim = make_sim(
        seed=4, offers=6, time_scale=1, host_class=HEALTHY, pacing=False, bids={"pressure": 0.0}
    )
    url = sim.url
    plain = httpx.post(f"{url}/api/v0/bundles/", json={}, headers=AUTH).json()["offers"]
    q = {"type": "bid", "order": [["dph_total", "asc"]]}
    spot = httpx.post(f"{url}/api/v0/bundles/", json=q, headers=AUTH).json()["offers"]
    assert all("is_bid" not in o for o in plain + spot)
    o = spot[0]
    assert o["min_bid"] < o["dph_base"]
    assert o["dph_total"] == pytest.approx(o["min_bid"] + o["storage_total_cost"], abs=1e-5)
    assert {x["id"]: x["dph_total"] for x in plain}[o["id"]] > o["dph_total"]
    # a bid under min_bid: created stopped, the error still names the instance
    low = httpx.put(
        f"{url}/api/v0/asks/{o['id']}/",
        json={"image": "img", "disk": 10, "price": round(o["min_bid"] / 2, 4)},
        headers=AUTH,
    )
    assert low.status_code == 400 and low.json()["error"] == "invalid_price"
    iid = low.json()["new_contract"]
    row = httpx.get(f"{url}/api/v0/instances/{iid}/", headers=AUTH).json()["instances"]
    assert (row["actual_status"], row["intended_status"], row["cur_state"]) == ("stopped",) * 3
    # the instance row says its type (`is_bid`, the OpenAPI's example field; [AC] 3): a bid
    assert row["is_bid"] is True and row["min_bid"] > 0
    # the truth says the market held it stopped from its create (no outbid: it never ran)
    [t] = [r for r in sim.call(sim.market.truth)["instances"] if r["id"] == iid]
    assert t["outbid_at"] == [] and t["bid_lost_at"] == [pytest.approx(t["created_at"])]
    # raising it over min_bid: it starts, billed at the new bid
    put = httpx.put(
        f"{url}/api/v0/instances/bid_price/{iid}/",
        json={"client_id": "me", "price": o["min_bid"] + 0.05},
        headers=AUTH,
    )
    assert put.json() == {"success": True}
    row = httpx.get(f"{url}/api/v0/instances/{iid}/", headers=AUTH).json()["instances"]
    assert row["intended_status"] == "running"
    assert row["dph_base"] == pytest.approx(o["min_bid"] + 0.05)
    bad = httpx.put(
        f"{url}/api/v0/instances/bid_price/{iid}/",
        json={"client_id": "me", "price": 0},
        headers=AUTH,
    )
    assert bad.status_code == 400 and bad.json()["msg"] == "Please set a bid price >= 0.001."
    missing = httpx.put(
        f"{url}/api/v0/instances/bid_price/99/", json={"client_id": "me", "price": 1}, headers=AUTH
    )
    assert missing.status_code == 404 and missing.json()["error"] == "no_such_instance"


def test_an_outbid_kills_the_hosts_processes_and_keeps_its_data(make_sim):
    sim = make_sim(
        seed=5,
        offers=4,
        time_scale=3000,
        host_class=HEALTHY,
        pacing=False,
        bids={"pressure": 0.0, "drift": 0.0},
    )
    key = asyncssh.generate_private_key("ssh-ed25519")
    url = sim.url
    httpx.post(
        f"{url}/api/v0/ssh/", json={"ssh_key": key.export_public_key().decode()}, headers=AUTH
    )
    spot = httpx.post(f"{url}/api/v0/bundles/", json={"type": "bid"}, headers=AUTH).json()
    o = spot["offers"][0]
    iid = httpx.put(
        f"{url}/api/v0/asks/{o['id']}/",
        json={"image": "img", "disk": 10, "price": o["min_bid"] + 0.01},
        headers=AUTH,
    ).json()["new_contract"]

    def row() -> dict:
        return httpx.get(f"{url}/api/v0/instances/{iid}/", headers=AUTH).json()["instances"]

    async def run() -> None:
        for _ in range(200):
            r = row()
            if r["actual_status"] == "running" and r["ssh_port"]:
                break
            await asyncio.sleep(0.05)
        async with asyncssh.connect(
            r["ssh_host"], r["ssh_port"], username="root", client_keys=[key], known_hosts=None
        ) as conn:
            await conn.run("echo kept > data.txt")
            proc = await conn.create_process("sleep 600")
            # outbid: a bid under the floor loses at once
            httpx.put(
                f"{url}/api/v0/instances/bid_price/{iid}/",
                json={"client_id": "me", "price": 0.001},
                headers=AUTH,
            )
            await asyncio.wait_for(proc.wait_closed(), 10)
        assert row()["actual_status"] == "stopped"

    asyncio.run(run())
    inst = sim.market.instances[iid]
    assert inst.paused_at is not None
    assert (sim.ssh.sandbox(inst) / "data.txt").read_text() == "kept\n"


def test_family_markets_carry_the_tier_with_pressure_spread():
    import tomllib

    from rentwatch.sim.family import draw_family
    from rentwatch.sim.scenario import to_toml

    fam = draw_family(2026, 12)
    pressures = [m.scenario.bids.pressure for m in fam]
    assert max(pressures) > 4 * min(pressures)  # quiet markets and fought-over ones
    for m in fam[:3]:
        per_model = m.scenario.bids.gpu_pressure
        assert set(per_model) == {g for c in m.scenario.host_classes for g in c.gpu}
        again = parse_scenario(tomllib.loads(to_toml(m.data)), m.scenario.name)
        assert again.bids == m.scenario.bids


def test_the_draws_kept_are_those_of_the_market_asked():
    """Floors and rivals are kept once drawn (`lru_cache`); what is kept never answers for
    another scenario's `[bids]`, another seed or a machine whose price moved."""
    mk = _market(offers=4, bids={"pressure": 6.0, "ondemand": 0.3})
    b, m, seed = mk.scenario.bids, mk.machines[0], mk.scenario.seed
    t = mk.clock.now()
    windows = range(int(t // 900), int(t // 900) + 96)

    def kept(b, seed) -> list:
        rival = bids._rival
        return [
            (
                rival(seed, b, m.id, m.dph_base, m.advertised_gpu, k),
                bids.floor_at(seed, b, m, k * 900),
            )
            for k in windows
        ]

    def fresh(b, seed) -> list:
        rival, floor = bids._rival.__wrapped__, bids._floor.__wrapped__
        return [
            (
                rival(seed, b, m.id, m.dph_base, m.advertised_gpu, k),
                floor(seed, b, m.id, m.dph_base, k),
            )
            for k in windows
        ]

    first = kept(b, seed)
    assert first == fresh(b, seed) and any(r for r, _ in first)
    other = parse_scenario({"host_class": HEALTHY, "bids": {"pressure": 0.5, "floor": [0.1, 0.2]}})
    assert kept(other.bids, seed) == fresh(other.bids, seed) != first
    assert kept(b, seed + 1) == fresh(b, seed + 1) != first
    m.dph_base = round(m.dph_base * 2, 4)  # the floor, and a rival's bid over it, move with it
    assert kept(b, seed) == fresh(b, seed) != first
