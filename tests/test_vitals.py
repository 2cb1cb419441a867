"""A GPU's vital signs: read from a host's sample as evidence (core/preflight/vitals.py), and drawn by the
simulator from the card and the host's state (sim/probe_answers.py)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from rentwatch.core.preflight.vitals import HOT_C, RANGES, read_vitals
from rentwatch.sim.probe_answers import gpu_vitals

anything = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)


@given(st.dictionaries(st.sampled_from(tuple(RANGES)), anything))
def test_any_sample_gives_figures_in_range_or_a_reason(sample):
    vitals, dropped = read_vitals(sample)
    for name in RANGES:
        value = getattr(vitals, name)
        if value is None:
            present = sample.get(name) is not None
            assert present == any(d.startswith(f"{name}:") for d in dropped), name
        else:
            lo, hi = RANGES[name]
            assert math.isfinite(value) and lo <= value <= hi
    if vitals.mem_used_mb is not None and vitals.mem_total_mb is not None:
        assert vitals.mem_used_mb <= vitals.mem_total_mb


def test_booleans_and_text_are_no_figures():
    vitals, dropped = read_vitals({"temp": True, "fan_pct": "50", "power_w": 2**2000})
    assert vitals.temp is vitals.fan_pct is vitals.power_w is None
    assert len(dropped) == 3


def key(machine: int = 5) -> tuple[int, int]:
    return (7, machine)


def test_a_thermal_throttle_runs_hot_and_a_power_cap_draws_at_a_lowered_limit():
    idle = gpu_vitals("RTX 4090", 24576, False, None, key())
    busy = gpu_vitals("RTX 4090", 24576, True, None, key())
    hot = gpu_vitals("RTX 4090", 24576, True, "sw_thermal_slowdown", key())
    capped = gpu_vitals("RTX 4090", 24576, True, "sw_power_cap", key())
    assert idle["temp"] < busy["temp"] < hot["temp"] and hot["temp"] >= 85
    assert hot["fan_pct"] == 100 and idle["power_w"] < busy["power_w"] < busy["power_limit_w"]
    assert busy["power_limit_w"] == 450.0  # the 4090's board power
    assert capped["power_limit_w"] < 450.0 and capped["power_w"] == capped["power_limit_w"]
    assert capped["power_w"] >= 0.97 * capped["power_limit_w"] and hot["temp"] >= HOT_C
    assert busy["power_w"] < 0.97 * busy["power_limit_w"] and busy["temp"] < HOT_C
    for v in (idle, busy, hot, capped):
        assert read_vitals(v)[1] == ()  # the simulator's own figures are believable


def test_a_consumer_card_has_no_ecc_and_a_passive_board_no_fan():
    consumer = gpu_vitals("RTX 3090", 24576, True, None, key())
    assert consumer["ecc_corrected"] is consumer["ecc_uncorrected"] is None
    sxm = gpu_vitals("H100 SXM", 81559, True, None, key())
    assert sxm["fan_pct"] is None and sxm["ecc_uncorrected"] == 0
    # each machine its own few degrees, the same from one sample to the next
    assert gpu_vitals("RTX 3090", 24576, True, None, key(1)) == gpu_vitals(
        "RTX 3090", 24576, True, None, key(1)
    )
