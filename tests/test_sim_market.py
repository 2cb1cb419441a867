"""The simulated market: behaviours are machine properties, shares and timings follow the
scenario, and the truth endpoint bills by the rules, to the cent."""

from __future__ import annotations

import asyncio
import math
import random

import httpx
import pytest
from rentwatch.core.billing import Mark, charges
from rentwatch.core.errors import ConfigError
from rentwatch.market.vast.client import VastClient
from rentwatch.sim.market import SimClock, SimMarket
from rentwatch.sim.scenario import BEHAVIOURS, DELIVERING, load_scenario, parse_scenario


def _market(**kw) -> SimMarket:
    sc = parse_scenario(kw)
    return SimMarket(sc, SimClock(sc.time_scale, origin=1_764_400_000.0), api_key="k")


def test_default_mix_is_the_articles():
    shares = parse_scenario({}).shares()
    assert set(shares) == set(BEHAVIOURS)
    assert math.isclose(sum(s for b, s in shares.items() if b not in DELIVERING), 0.62)


def test_bad_day_fails_three_in_four():
    shares = parse_scenario({"bad_day": True}).shares()
    assert math.isclose(sum(s for b, s in shares.items() if b not in DELIVERING), 0.75)


def test_same_seed_same_market_and_boots():
    a, b = _market(seed=11, offers=40), _market(seed=11, offers=40)
    assert [(m.id, m.behaviour, m.dph_base) for m in a.machines] == [
        (m.id, m.behaviour, m.dph_base) for m in b.machines
    ]
    # rent in a different order: each machine still boots the same way
    ma, mb = a.machines[:5], list(reversed(b.machines[:5]))
    ia = {m.id: a.create(m.offer_id, "img", 10, None, {}, None) for m in ma}
    ib = {m.id: b.create(m.offer_id, "img", 10, None, {}, None) for m in mb}
    for mid in ia:
        sa = [(s.at - ia[mid].created_at, s.actual, s.msg) for s in ia[mid].segments[0].steps]
        sb = [(s.at - ib[mid].created_at, s.actual, s.msg) for s in ib[mid].segments[0].steps]
        assert sa == sb
    assert _market(seed=12, offers=40).machines[0].id != a.machines[0].id


def test_a_destroyed_dud_is_listed_again():
    m = _market(seed=2, offers=10)
    dud = next(x for x in m.machines if x.behaviour == "freeze_pull")
    inst = m.create(dud.offer_id, "img", 10, None, {}, None)
    assert dud.id not in {x.id for x in m.offers(m.clock.now())}
    m.destroy(inst)
    assert dud.id in {x.id for x in m.offers(m.clock.now())}
    again = m.create(dud.offer_id, "img", 10, None, {}, None)
    m.clock.advance(3 * 3600)
    assert again.status(m.clock.now())[0] == "loading"  # still frozen: a property of the machine


@pytest.mark.parametrize("behaviour", BEHAVIOURS)
def test_every_behaviour_boots_as_described(behaviour):
    m = _market(seed=5, offers=20, host_class=[{"behaviour": behaviour, "share": 1.0}])
    inst = m.create(m.machines[0].offer_id, "pytorch/pytorch:2.4.0", 20, None, {}, None)
    seen = []
    for _ in range(24 * 60):  # three hours, a sample every 7.5 sim-seconds... coarse is enough
        m.clock.advance(7.5)
        st = inst.status(m.clock.now())
        if not seen or seen[-1] != st:
            seen.append(st)
    statuses = [s for s, _ in seen]
    final_status, final_msg = seen[-1]
    gpu = m.gpu_state(inst, m.clock.now())
    if behaviour in (
        "healthy",
        "slow_pull",
        "stale_driver",
        "misreported",
        "throttled",
        "ssh_dead",
    ):
        assert final_status == "running" and final_msg.startswith("success, running")
    if behaviour == "freeze_pull":
        assert "running" not in statuses and final_status == "loading"
        assert "Downloading" in final_msg
    if behaviour == "fatal_pull":
        assert "running" not in statuses
        from rentwatch.core.blame.patterns import fatal_match

        assert fatal_match(final_msg)
    if behaviour == "exited":
        assert "running" in statuses and final_status == "exited"
    if behaviour == "offline_midrun":
        assert "running" in statuses and final_status == "offline"
    if behaviour == "stale_driver":
        assert gpu["cuda_works"] is False and gpu["util"] == 0
    if behaviour == "misreported":
        assert (
            gpu["name"].split()[-1] != inst.machine.advertised_gpu.split()[-1]
            or gpu["tflops"] < 0.6 * 64
        )
    if behaviour == "throttled":
        assert gpu["sm_clock"] < gpu["max_sm_clock"] and gpu["throttle_reasons"]
    if behaviour == "healthy":
        # healthy hosts have long silent extraction phases, but under six minutes
        msgs = [(s.at, s.msg) for s in inst.segments[0].steps]
        gaps = [b[0] - a[0] for a, b in zip(msgs, msgs[1:], strict=False)]
        assert max(gaps) < 6 * 60


def test_hundred_creates_shares_timings_and_billing(make_sim):
    """A plain client loop: 100 creates on random offers, each destroyed after a while.
    Shares follow the scenario; healthy boot times sit in the scenario's ranges; the truth's
    charges equal the billing rules applied to the recorded times, to the cent."""
    sim = make_sim(seed=21, offers=60, time_scale=3000, gpu_billing="created")
    rng = random.Random(4)

    async def loop() -> list[int]:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            ids = []
            for _ in range(100):
                offers = await c.search_offers({"rentable": {"eq": True}})
                pick = rng.choice(offers)
                res = await c.create_instance(pick.id, image="img", disk_gb=20)
                ids.append(res.instance_id)
                live = [i for i in await c.list_instances()]
                if len(live) > 8:  # keep a few alive while new ones boot
                    await c.destroy_instance(live[0].id)
            return ids

    ids = asyncio.run(loop())
    assert len(set(ids)) == 100
    truth = sim.call(sim.market.truth)
    rows = {r["id"]: r for r in truth["instances"]}
    expected = sim.market.scenario.shares()
    counts: dict[str, int] = {}
    for iid in ids:
        counts[rows[iid]["behaviour"]] = counts.get(rows[iid]["behaviour"], 0) + 1
    duds = sum(c for b, c in counts.items() if b not in DELIVERING)
    # binomial sampling error at n=100, p=0.62 is ~4.9 points; allow three of them
    assert abs(duds - 62) <= 15, counts
    for b, share in expected.items():
        assert (
            abs(counts.get(b, 0) - 100 * share) <= 3 * math.sqrt(100 * share * (1 - share)) + 2
        ), (b, counts)
    # healthy boots: queue + pull + extract + start within the knobs' ranges (in minutes)
    for iid in ids:
        r = rows[iid]
        if r["behaviour"] == "healthy" and r["running_at"]:
            boot_min = (r["running_at"] - r["created_at"]) / 60
            assert 0.3 + 6 + 1 + 0.2 <= boot_min <= 1.5 + 16 + 4 + 0.8 + 1.5, boot_min
    # billing: storage from create to destroy, GPU from the create (created mode)
    now = truth["now"]
    total = 0.0
    for iid in ids:
        r = rows[iid]
        inst = sim.market.instances[iid]
        end = r["destroyed_at"] or now
        # a host that went dark bills nothing from then, storage included (how much market
        # time the loop took, and so whether an offline_midrun host dropped within it, is the
        # box's load)
        if r["offline_at"] is not None:
            end = min(end, r["offline_at"])
        hours = (end - r["created_at"]) / 3600
        assert abs(r["storage_usd"] - inst.storage_dph * hours) < 0.005
        assert abs(r["gpu_usd"] - inst.gpu_dph * hours) < 0.005
        total += r["total_usd"]
    assert abs(total - truth["totals"]["total_usd"]) < 0.01


def test_running_billing_counts_only_running_time():
    m = _market(
        seed=5, offers=5, gpu_billing="running", host_class=[{"behaviour": "healthy", "share": 1}]
    )
    inst = m.create(m.machines[0].offer_id, "img", 40, None, {}, None)
    m.clock.advance(3600)
    running_at = inst.segments[0].running_at
    m.stop(inst)
    m.clock.advance(600)
    row = m.truth()["instances"][0]
    now = m.clock.now()
    assert abs(row["gpu_usd"] - inst.gpu_dph * (inst.stops[0] - running_at) / 3600) < 1e-6
    assert abs(row["storage_usd"] - inst.storage_dph * (now - inst.created_at) / 3600) < 1e-6
    assert row["stopped_at"] == inst.stops[0]


def test_the_truth_dates_when_a_host_went_dark():
    m = _market(seed=6, offers=3, host_class=[{"behaviour": "offline_midrun", "share": 1}])
    inst = m.create(m.machines[0].offer_id, "img", 40, None, {}, None)
    assert m.truth()["instances"][0]["offline_at"] is None  # still booting: not yet
    m.clock.advance(24 * 3600)
    row = m.truth()["instances"][0]
    assert row["offline_at"] == inst.segments[0].offline_at
    assert row["running_at"] < row["offline_at"] <= m.clock.now()


def test_billing_function_stop_start_and_price_change():
    marks = [
        Mark(0, "create", 1.0, 0.1),
        Mark(1800, "running"),
        Mark(3600, "stop"),
        Mark(7200, "start", 2.0),
        Mark(9000, "destroy"),
    ]
    c = charges(marks, "created", now=10_000)
    assert math.isclose(c.gpu_usd, 1.0 + 2.0 * 0.5)
    assert math.isclose(c.storage_usd, 0.1 * 2.5)
    c = charges(marks, "running", now=10_000)
    assert math.isclose(c.gpu_usd, 0.5)  # the restart never reached running
    assert math.isclose(charges(marks, "created", now=900).total_usd, 0.25 + 0.025)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("seed = 'x'", "seed"),
        ("offers = 0", "offers"),
        ("gpu_billing = 'sometimes'", "gpu_billing"),
        ("[[host_class]]\nbehaviour = 'zombie'\nshare = 1", "zombie"),
        ("[[host_class]]\nbehaviour = 'healthy'\nshare = 1\npull_min = [9, 3]", "pull_min"),
        ("[faults]\nrate_429 = 2", "rate_429"),
        ("time_scale = ", "scenario"),
        ("colour = 1", "colour"),
    ],
)
def test_broken_scenarios_are_named(tmp_path, text, needle):
    p = tmp_path / "s.toml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=needle) as err:
        load_scenario(p)
    assert str(p) in str(err.value)  # which file, whether TOML or a setting is wrong


def test_truth_endpoint_and_auth(make_sim):
    sim = make_sim(offers=5)
    t = httpx.get(f"{sim.url}/sim/v0/truth").json()
    assert set(t) >= {"now", "instances", "totals"} and t["totals"]["total_usd"] == 0
    r = httpx.get(f"{sim.url}/api/v0/instances/?owner=me", headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and r.json()["error"] == "auth_error"
    r = httpx.get(f"{sim.url}/api/v1/instances/?owner=me&api_key=test-key")
    assert r.status_code == 200 and r.json()["instances"] == []  # (the v0 list is deprecated)
    r = httpx.post(
        f"{sim.url}/api/v0/bundles/",
        json={"num_gpus": {"eq": "1"}, "limit": 2, "order": [["dph_total", "asc"]]},
        headers={"Authorization": "Bearer test-key"},
    )
    assert r.headers["content-type"] == "application/json"
    prices = [o["dph_total"] for o in r.json()["offers"]]
    assert len(prices) == 2 and prices == sorted(prices)
