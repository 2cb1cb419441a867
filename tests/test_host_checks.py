"""The deeper host checks: each catches its failure, passes a healthy host, and ends every
hostile or missing input in a typed `ok=None`, never a crash."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rentwatch.core.preflight.checks import (
    Check,
    deep_checks,
    disk_check,
    first_failure,
    net_check,
    pcie_check,
    vram_check,
    xid_check,
)
from rentwatch.core.preflight.gpu_specs import GPU_SPECS, expected_tflops, same_model, spec_for
from rentwatch.core.preflight.verdict import CheckPolicy, detect_throttle, preflight_verdict
from rentwatch.sim.scenario import CONSUMER_GPUS

P = CheckPolicy()


@pytest.mark.parametrize(
    "pcie, ok, cls",
    [
        ({"gen": 4, "width": 16, "max_gen": 4, "max_width": 16, "h2d_gbps": 24.1}, True, None),
        # an idle card at gen 1 with a healthy copy is fine: generation alone proves nothing
        ({"gen": 1, "width": 16, "max_gen": 4, "max_width": 16, "h2d_gbps": 22.0}, True, None),
        (
            {"gen": 3, "width": 1, "max_gen": 4, "max_width": 16, "h2d_gbps": 0.8},
            False,
            "narrow_pcie",
        ),
        # width unreadable (no pynvml), bandwidth tells
        ({"h2d_gbps": 0.7}, False, "narrow_pcie"),
        ({"gen": None, "width": None, "h2d_gbps": None}, None, None),
        ({"error": {"type": "CUDAError", "message": "copy failed"}}, None, None),
        ({"width": "x16; rm -rf", "h2d_gbps": float("nan")}, None, None),
    ],
)
def test_pcie(pcie, ok, cls):
    c = pcie_check({"pcie": pcie}, "RTX 4090", P)
    assert (c.ok, c.failure_class) == (ok, cls), c.reason


@pytest.mark.parametrize(
    "vram, ram, ok",
    [
        ({"allocated_mb": 23800, "total_mb": 24564}, 24576, True),
        ({"allocated_mb": 14000, "total_mb": 24564}, 24576, False),
        ({"allocated_mb": None}, 24576, None),
        ({"allocated_mb": 23800}, None, None),
        ({"allocated_mb": True}, 24576, None),
        ("garbage", 24576, None),
    ],
)
def test_vram(vram, ram, ok):
    c = vram_check({"vram": vram}, ram, P)
    assert c.ok is ok and (ok is not False or c.failure_class == "short_vram")


@pytest.mark.parametrize(
    "disk, wanted, bw, cls",
    [
        ({"free_gb": 39.5, "write_mb_s": 1400.0}, 40, 2000, None),
        ({"free_gb": 12.0, "write_mb_s": 1400.0}, 40, 2000, "small_disk"),
        ({"free_gb": 39.5, "write_mb_s": 90.0}, 40, 2000, "slow_disk"),
        ({"free_gb": None, "write_mb_s": None}, 40, 2000, "unknown"),
        ({"free_gb": -5, "write_mb_s": "fast"}, 40, 2000, "unknown"),
    ],
)
def test_disk(disk, wanted, bw, cls):
    c = disk_check({"disk": disk}, wanted, bw, P)
    assert (c.failure_class or ("unknown" if c.ok is None else None)) == cls, c.reason


def test_net_probe_figure_against_inet_down():
    assert net_check(700.0, 1000.0, P).ok is True
    slow = net_check(30.0, 1000.0, P)
    assert slow.ok is False and slow.failure_class == "slow_net"
    assert net_check(None, 1000.0, P).ok is None
    assert net_check(30.0, 0, P).ok is None


@pytest.mark.parametrize(
    "xid, ok",
    [
        ({"events": [], "supported": True}, True),
        ({"events": [{"xid": 13}, {"xid": 31}], "supported": True}, True),  # the job's faults
        ({"events": [{"xid": 79}], "supported": True}, False),
        ({"events": [{"type": "double_bit_ecc", "xid": None}]}, False),
        ({"events": [], "gpu_lost": True}, False),
        ({"events": [], "supported": False}, None),
        ({"events": "79"}, True),
        (None, None),
    ],
)
def test_xid(xid, ok):
    c = xid_check({"xid": xid})
    assert c.ok is ok and (ok is not False or c.failure_class == "xid")


def test_deep_checks_on_a_document_without_sections_never_fail():
    checks = deep_checks({"probe": "preflight"}, {"gpu_name": "RTX 3090"}, 40, P)
    assert {c.name for c in checks} == {"pcie", "vram", "disk", "net", "xid"}
    assert all(isinstance(c, Check) and c.ok is None for c in checks)
    assert first_failure(checks) is None
    off = CheckPolicy(pcie=False, vram=False, disk=False, net=False, xid=False)
    assert deep_checks({}, {}, None, off) == []


@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4),
        max_leaves=20,
    )
)
def test_hostile_sections_end_in_a_typed_result(junk):
    doc = {k: junk for k in ("pcie", "vram", "disk", "net", "xid")}
    offer = {"gpu_name": "RTX 4090", "gpu_ram": junk, "disk_bw": junk, "inet_down": junk}
    for c in deep_checks(doc, offer, 40, P):
        assert c.ok in (True, False, None) and isinstance(c.reason, str)


def test_every_gpu_the_sim_offers_has_an_expected_speed_a100_pcie_included():
    for name in {*GPU_SPECS, *CONSUMER_GPUS, "A100 PCIE"}:
        assert expected_tflops(name), name
        assert expected_tflops(name, "driver"), name
    assert spec_for("NVIDIA A100-PCIE-40GB") is GPU_SPECS["A100 PCIE"]
    assert same_model("A100 PCIE", "NVIDIA A100 80GB PCIe")
    assert not same_model("RTX 3060", "NVIDIA GeForce RTX 3060 Ti")


def test_throttle_reasons_as_nvml_defines_them():
    def s(clock, reasons, util=98):
        return {"util": util, "sm_clock": clock, "max_sm_clock": 2000, "reasons": reasons}

    # hardware slowdown counts even before the clock shows it
    assert detect_throttle([s(1950, ["hw_slowdown"])] * 5).throttled
    assert detect_throttle([s(1950, ["hw_power_brake_slowdown"])] * 5).throttled
    # the power cap at full clocks is the card working as designed
    assert not detect_throttle([s(1950, ["sw_power_cap"])] * 5).throttled
    assert detect_throttle([s(1500, ["sw_power_cap"])] * 5).throttled
    # sustained software thermal counts; idle, app clocks, display, sync boost never
    assert detect_throttle([s(1500, ["sw_thermal_slowdown"])] * 5).throttled
    for never in ("gpu_idle", "applications_clocks_setting", "display_clock_setting", "sync_boost"):
        assert not detect_throttle([s(900, [never])] * 5).throttled, never
    assert not detect_throttle([s(900, ["hw_slowdown"], util=0)] * 5).throttled


def _doc(tflops, backend=None):
    d = {
        "schema": 1,
        "probe": "preflight",
        "ok": True,
        "device": {"name": "NVIDIA GeForce RTX 4090"},
        "matmul": {"result_ok": True, "tflops": tflops, "max_rel_err": 0.0},
    }
    if backend:
        d["backend"] = backend
    return d


def test_driver_backend_is_held_to_the_driver_kernel_speed():
    fp32_share = expected_tflops("RTX 4090", "driver")
    assert fp32_share and not math.isclose(fp32_share, expected_tflops("RTX 4090") or 0)
    ok = preflight_verdict(_doc(fp32_share * 0.9, "driver"), "RTX 4090", 0.6)
    assert ok.ok and "driver API" in ok.reason
    # the same figure through torch is far too slow for a 4090
    assert preflight_verdict(_doc(fp32_share * 0.9), "RTX 4090", 0.6).failure_class == "too_slow"
    # a 3060 sold as a 4090 is caught on the driver path too
    slow = expected_tflops("RTX 3060", "driver") or 0
    assert preflight_verdict(_doc(slow, "driver"), "RTX 4090", 0.6).failure_class == "too_slow"
