"""The simulator's per-GPU prices (calibration, issue 19 item 5) and a preloaded account (the
scale benchmark's fleet, issue 19 item 2)."""

from __future__ import annotations

import pytest
from rentwatch.core.errors import ConfigError
from rentwatch.sim.market import Market, SimClock
from rentwatch.sim.scenario import GPU_DPH, parse_scenario


def _market(**kw) -> Market:
    sc = parse_scenario(kw)
    return Market(sc, SimClock(sc.time_scale, origin=1_764_400_000.0), api_key="k")


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
