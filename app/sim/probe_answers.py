"""What the on-host probes print on a simulated GPU, the one thing a simulated host cannot run for
real, from `SimMarket.gpu_state` and the host's behaviour."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from . import host_behaviours as hb
from .images import image_facts
from .market import SimMarket
from .rental import SimInstance

PROBE_MARKER = b"# rentwatch-probe:"


def probe_answer(
    market: SimMarket, inst: SimInstance, script: bytes, command: str, busy: Callable[[], bool]
) -> bytes:
    """What one of the two GPU probes (named by its `# rentwatch-probe:` header) would print on
    this instance's machine now; `busy` says whether a job runs in the host's sandbox."""
    kind = (
        script[len(PROBE_MARKER) : script.index(b"\n")].strip().decode() if b"\n" in script else ""
    )
    if kind == "nvml_sample" and busy():
        inst.busy_until = max(inst.busy_until, market.clock.now() + 1)
    now = market.clock.now()
    gpu = market.gpu_state(inst, now)
    m = inst.machine
    facts = hb.host_facts(
        m.behaviour,
        market.scenario.seed,
        m.id,
        inst.rental_no,
        m.real_gpu,
        m.offer_json(inst.disk_gb),
        inst.disk_gb,
    )
    seg = inst.segments[-1]
    lost_at = hb.xid_at(m.behaviour, seg.running_at, m.knobs, (market.scenario.seed, inst.id))
    lost = lost_at is not None and now >= lost_at
    if kind == "preflight":
        doc = hb.preflight_document(
            preflight_answer(gpu),
            facts,
            image_facts(inst.image, market.scenario.images),
            gpu,
            m.real_gpu,
            command,
            lost,
            forged_as=m.advertised_gpu if m.behaviour == "forged_preflight" else None,
        )
    elif kind == "nvml_sample":
        doc = hb.nvml_document(nvml_answer(gpu, now), facts, lost)
    else:
        unknown = {"type": "UnknownProbe", "message": kind}
        doc = {"schema": 1, "probe": kind, "ok": False, "error": unknown}
    return (json.dumps(doc) + "\n").encode()


def preflight_answer(gpu: dict[str, Any], n: int = 4096) -> dict[str, Any]:
    """What probes/preflight.py prints on a GPU in this state (same schema)."""
    device = {
        "name": gpu["name"],
        "driver_version": gpu["driver_version"],
        "cuda_version": gpu["cuda_version"],
        "total_memory_mb": gpu["vram_mb"],
    }
    if not gpu["cuda_works"]:
        return {
            "schema": 1,
            "probe": "preflight",
            "ok": False,
            "device": device,
            "error": {
                "type": "RuntimeError",
                "message": "CUDA error: CUDA driver version is insufficient for CUDA runtime version",
            },
            "steps": {"cuda_init_s": 1.9},
            "total_s": 2.1,
        }
    secs = 2 * n**3 * 10 / (gpu["tflops"] * 1e12)
    return {
        "schema": 1,
        "probe": "preflight",
        "ok": True,
        "device": device,
        "matmul": hb.matmul(n, "bfloat16", secs, round(gpu["tflops"], 2), 0.0021),
        "steps": {
            "cuda_init_s": 1.2,
            "alloc_s": 0.05,
            "warmup_s": 0.3,
            "timed_s": round(secs, 4),
            "check_s": 0.4,
        },
        "total_s": round(1.95 + secs, 3),
        "error": None,
    }


_REASON_BITS = {
    "gpu_idle": 0x1,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}


def nvml_answer(gpu: dict[str, Any], now: float) -> dict[str, Any]:
    """What probes/nvml_sample.py prints for one sample on a GPU in this state."""
    bits = 0
    for r in gpu["throttle_reasons"]:
        bits |= _REASON_BITS.get(r, 0)
    sample = {
        "t": now,
        "index": 0,
        "name": gpu["name"],
        "util": gpu["util"],
        "mem_util": gpu["util"] // 2,
        "mem_used_mb": gpu["mem_used_mb"],
        "mem_total_mb": gpu["mem_total_mb"],
        "sm_clock": gpu["sm_clock"],
        "max_sm_clock": gpu["max_sm_clock"],
        "reasons_bits": bits,
        "reasons": list(gpu["throttle_reasons"]),
        "temp": gpu["temp"],
        "power_w": gpu["power_w"],
        "power_limit_w": gpu["power_limit_w"],
        "fan_pct": gpu["fan_pct"],
        "ecc_corrected": gpu["ecc_corrected"],
        "ecc_uncorrected": gpu["ecc_uncorrected"],
        "retired_pages": gpu["retired_pages"],
        "pcie_gen": 4,
        "pcie_width": 16,
        "driver_version": gpu["driver_version"],
    }
    return {"schema": 1, "probe": "nvml_sample", "ok": True, "samples": [sample]}
