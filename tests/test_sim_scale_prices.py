"""The simulator's per-GPU prices (calibration, issue 19 item 5), a preloaded account (the
scale benchmark's fleet, item 2), and SSH sessions without the container's variables."""

from __future__ import annotations

import asyncio
import time

import asyncssh
import pytest
from rentwatch.core.errors import ConfigError
from rentwatch.market.vast.client import VastClient
from rentwatch.sim.market import SimClock, SimMarket
from rentwatch.sim.scenario import GPU_DPH, parse_scenario


def _market(**kw) -> SimMarket:
    sc = parse_scenario(kw)
    return SimMarket(sc, SimClock(sc.time_scale, origin=1_764_400_000.0), api_key="k")


def test_prices_follow_the_gpu_model_unless_the_class_names_its_own():
    by_gpu = _market(seed=3, offers=300, host_class=[{"behaviour": "healthy", "share": 1}])
    for m in by_gpu.machines:
        lo, hi = GPU_DPH[m.advertised_gpu]
        assert lo <= m.dph_base <= hi, (m.advertised_gpu, m.dph_base)
    cheap = {m.dph_base for m in by_gpu.machines if m.advertised_gpu == "RTX 3060"}
    dear = {m.dph_base for m in by_gpu.machines if m.advertised_gpu == "RTX 4090"}
    assert cheap and dear and max(cheap) < min(dear)
    own = _market(
        seed=3, offers=50, host_class=[{"behaviour": "healthy", "share": 1, "dph": [0.9, 1.0]}]
    )
    assert all(0.9 <= m.dph_base <= 1.0 for m in own.machines)


def test_scenario_gpu_list_applies_to_classes_naming_none():
    m = _market(seed=4, offers=40, gpu=["RTX 4090"])
    assert {x.advertised_gpu for x in m.machines} == {"RTX 4090"}
    assert all(0.31 <= x.dph_base <= 0.45 for x in m.machines)
    with pytest.raises(ConfigError):
        parse_scenario({"gpu": [3090]})


def test_preload_rents_a_fleet_at_the_start():
    m = _market(
        seed=5,
        offers=30,
        preload=30,
        preload_booting=4,
        host_class=[{"behaviour": "healthy", "share": 1}],
    )
    now = m.clock.now()
    insts = [m.instances[i] for i in m.order]
    assert [i.label for i in insts] == [f"preload:{n}" for n in range(30)]
    running = [i for i in insts if i.status(now)[0] == "running"]
    assert len(running) == 26 and all(i.created_at < now - 3500 for i in running)
    assert all(i.status(now)[0] != "running" for i in insts[26:])
    with pytest.raises(ConfigError):
        parse_scenario({"offers": 5, "preload": 6})
    with pytest.raises(ConfigError):
        parse_scenario({"offers": 5, "preload": 2, "preload_booting": 3})


def test_sessions_may_lack_the_container_variables(make_sim):
    """`[ssh] container_env`: the share of instances whose SSH sessions carry CONTAINER_ID and
    CONTAINER_API_KEY; the rest get neither (real sessions may lack them, issue 19)."""
    sim = make_sim(
        seed=3,
        offers=12,
        time_scale=3000,
        ssh={"container_env": 0.5},
        host_class=[{"behaviour": "healthy", "share": 1}],
    )
    key = asyncssh.generate_private_key("ssh-ed25519")

    async def run() -> dict[int, str]:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            await c.add_ssh_key(key.export_public_key().decode())
            for offer in await c.search_offers({}):
                await c.create_instance(offer.id, image="img", disk_gb=10)
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                live = [i for i in await c.list_instances() if i.status == "running"]
                if len(live) == 12 and all(i.ssh_port for i in live):
                    break
                await asyncio.sleep(0.1)
            out = {}
            for inst in live:
                async with asyncssh.connect(
                    inst.ssh_host,
                    inst.ssh_port,
                    username="root",
                    client_keys=[key],
                    known_hosts=None,
                ) as conn:
                    out[inst.id] = (await conn.run("echo ${CONTAINER_ID:-none}")).stdout.strip()
            return out

    seen = asyncio.run(run())
    assert len(seen) == 12
    carry = {iid for iid, v in seen.items() if v == str(iid)}
    assert 0 < len(carry) < 12  # a share, not all, not none
    assert all(seen[iid] == "none" for iid in set(seen) - carry)
    hosts = sim.ssh
    assert carry == {i for i in seen if hosts.container_env(sim.market.instances[i])}
