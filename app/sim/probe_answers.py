"""What the two GPU probes print on a simulated host (the preflight and the NVML sampler), drawn
per rental so repeated probes agree."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.preflight.checks import link_gbps
from ..core.preflight.gpu_specs import expected_tflops, spec_for
from ..core.preflight.proof import exact_entry, sample_positions
from .images import image_facts
from .machines import DISK_BW_MB_S, keyed_rng, vram_mb
from .rental import SimInstance

if TYPE_CHECKING:
    from .market import SimMarket

PROBE_MARKER = b"# rentwatch-probe:"
NO_PYTHON_STDERR = b"bash: line 1: python3: command not found\n"
NO_PYTHON_EXIT = 127

# default total board power (W), NVIDIA's product specifications
BOARD_POWER_W = {
    "RTX 3060": 170.0,
    "RTX 3060 Ti": 200.0,
    "RTX 3070": 220.0,
    "RTX 3080": 320.0,
    "RTX 3080 Ti": 350.0,
    "RTX 3090": 350.0,
    "RTX 3090 Ti": 450.0,
    "RTX 4070": 200.0,
    "RTX 4080": 320.0,
    "RTX 4090": 450.0,
    "RTX 5090": 575.0,
    "RTX A4000": 140.0,
    "RTX A5000": 230.0,
    "RTX A6000": 300.0,
    "L40S": 350.0,
    "A100 SXM4": 400.0,
    "H100 SXM": 700.0,
    "H200": 700.0,
}
DEFAULT_BOARD_POWER_W = 300.0
ECC_BOARDS = frozenset(
    {"RTX A4000", "RTX A5000", "RTX A6000", "L40S", "A100 SXM4", "H100 SXM", "H200"}
)
PASSIVE_BOARDS = frozenset({"L40S", "A100 SXM4", "H100 SXM", "H200"})
THERMAL_REASONS = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown"})
POWER_CAP_SHARE = 0.6  # a power-capped host's enforced limit, as a share of the board's
# the preflight's deeper checks, each with the flag that turns it off
CHECK_OFF = {"pcie": "--pcie-mb 0", "vram": "--no-vram", "disk": "--disk-mb -1"}
# what each preflight backend raises once the GPU fell off the bus
# what each raises when CUDA cannot start (a driver older than the image's CUDA)
NO_CUDA = {
    "torch": {
        "type": "RuntimeError",
        "message": "CUDA error: CUDA driver version is insufficient for CUDA runtime version",
    },
    "driver": {
        "type": "CudaError",
        "message": "cuInit failed: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)",
    },
}
GPU_LOST = {
    "driver": {"type": "CudaError", "message": "cuInit failed: CUDA_ERROR_NO_DEVICE (100)"},
    "torch": {"type": "RuntimeError", "message": "CUDA error: no CUDA-capable device is detected"},
}


def gpu_vitals(
    model: str,
    vram_mb: int,
    busy: bool,
    throttle_reason: str | None,
    key: tuple[Any, ...],
) -> dict[str, Any]:
    """The vital signs of one card now. `throttle_reason` is set while the host throttles;
    `key` (seed, machine) keeps each machine's own few degrees and watts from poll to poll."""
    rng = keyed_rng("vitals", *key)
    warm, spread = rng.uniform(-3.0, 5.0), rng.uniform(0.9, 1.0)
    board = BOARD_POWER_W.get(model, DEFAULT_BOARD_POWER_W)
    limit = board
    if throttle_reason in THERMAL_REASONS:
        temp, fan, draw = 90.0 + warm / 2, 100, 0.8 * board * spread
    elif throttle_reason is not None:  # a power cap the host set: drawing all it is allowed
        limit = round(board * POWER_CAP_SHARE)
        temp, fan, draw = 74.0 + warm, 62, float(limit)
    elif busy:
        temp, fan, draw = 71.0 + warm, 58, 0.85 * board * spread
    else:
        temp, fan, draw = 38.0 + warm, 30, 0.07 * board
    ecc = model in ECC_BOARDS
    return {
        "mem_used_mb": int(vram_mb * 0.75) if busy or throttle_reason else 300,
        "mem_total_mb": vram_mb,
        "temp": int(round(temp)),
        "power_w": round(draw, 1),
        "power_limit_w": float(limit),
        "fan_pct": None if model in PASSIVE_BOARDS else fan,
        "ecc_corrected": 0 if ecc else None,
        "ecc_uncorrected": 0 if ecc else None,
        # not modelled: null, as a board without page retirement answers (docs/fidelity.md)
        "retired_pages": None,
    }


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
    if kind == "preflight":
        doc = preflight_document(market, inst, command, now)
    elif kind == "nvml_sample":
        doc = nvml_document(market, inst, now)
    else:
        unknown = {"type": "UnknownProbe", "message": kind}
        doc = {"schema": 1, "probe": kind, "ok": False, "error": unknown}
    return (json.dumps(doc) + "\n").encode()


def host_facts(seed: int, inst: SimInstance) -> dict[str, Any]:
    """What this rental's checks measure: near the offer's if healthy, far under if faulty."""
    m, disk_gb = inst.machine, inst.disk_gb
    behaviour = m.behaviour
    rng = keyed_rng(seed, m.id, inst.rental_no, "checks")
    spec = spec_for(m.real_gpu)
    gen, width = (spec.pcie_gen, spec.pcie_width) if spec else (4, 16)
    cur_gen, cur_width = gen, width
    if behaviour == "narrow_pcie":
        # a mining riser: x1, often on an older generation slot
        cur_gen, cur_width = rng.choice([(3, 1), (2, 1), (gen, 1), (3, 2)])
    h2d = link_gbps(cur_gen, cur_width) * rng.uniform(0.85, 1.0)
    gpu_ram = float(vram_mb(m.advertised_gpu))
    total_mb = int(gpu_ram)
    share = rng.uniform(0.45, 0.7) if behaviour == "short_vram" else 1.0
    # the context and the probe's reserve take ~0.5 GB off a healthy card
    allocated = int(gpu_ram * share) - rng.randint(420, 560)
    disk_bw = DISK_BW_MB_S
    free_gb = disk_gb * rng.uniform(0.9, 0.98)
    write = disk_bw * rng.uniform(0.4, 0.9)
    if behaviour == "slow_disk":
        if rng.random() < 0.5:
            write = disk_bw * rng.uniform(0.02, 0.08)  # a tired SATA disk behind an "nvme" offer
        else:
            free_gb = disk_gb * rng.uniform(0.2, 0.45)  # the volume is smaller than allocated
    inet = m.inet_down or 500.0
    net = inet * (rng.uniform(0.01, 0.05) if behaviour == "slow_net" else rng.uniform(0.4, 0.9))
    return {
        "pcie": {
            "gen": cur_gen,
            "width": cur_width,
            "max_gen": gen,
            "max_width": width,
            "h2d_gbps": round(h2d, 3),
            "mb": 128,
        },
        "vram": {"total_mb": total_mb, "free_mb": allocated + 256, "allocated_mb": allocated},
        "disk": {
            "path": "/root",
            "free_gb": round(free_gb, 2),
            "write_mb_s": round(write, 1),
            "written_mb": 256,
        },
        "net_mbps": round(net, 1),
    }


def xid_at(seed: int, inst: SimInstance) -> float | None:
    """When an `xid_mid_job` host's GPU falls off the bus in its last boot (market time), else
    None."""
    m, running_at = inst.machine, inst.segments[-1].running_at
    if m.behaviour != "xid_mid_job" or running_at is None:
        return None
    lo, hi = m.knobs.get("xid_after_min", [8.0, 30.0])
    return running_at + keyed_rng((seed, inst.id), "xid").uniform(lo, hi) * 60


def _lost(market: SimMarket, inst: SimInstance, now: float) -> bool:
    lost_at = xid_at(market.scenario.seed, inst)
    return lost_at is not None and now >= lost_at


def preflight_document(
    market: SimMarket, inst: SimInstance, command: str, now: float
) -> dict[str, Any]:
    """The preflight's document on this host at `now` (torch, or the driver path's) with the
    deeper checks' sections and the entries the `--nonce` picks. A `forged_preflight` host's
    CUDA calls fail, and it replays a good run's document (its nonce is not this run's)."""
    m = inst.machine
    gpu = market.gpu_state(inst, now)
    if m.behaviour == "forged_preflight":
        rate = round((expected_tflops(m.advertised_gpu) or 60.0) * 1.41, 2)
        good = preflight_answer(gpu | {"cuda_works": True}, "torch", rate)
        forged = preflight_answer(gpu, "torch", rate) | {"ok": True, "error": None}
        forged["device"]["name"] = m.advertised_gpu
        forged["matmul"] = _sampled(good["matmul"], 1234567)  # the nonce it was copied from
        return forged | {"xid": {"supported": True, "events": [], "gpu_lost": False}}
    if image_facts(inst.image, market.scenario.images).torch:
        doc = preflight_answer(gpu, "torch", gpu["tflops"])
    else:
        spec = spec_for(m.real_gpu)
        share = gpu["tflops"] / spec.bf16_tflops if spec and spec.bf16_tflops else 1.0
        rate = (expected_tflops(m.real_gpu, "driver") or 2.0) * share
        doc = preflight_answer(gpu, "driver", rate)
    if _lost(market, inst, now):
        doc.update(ok=False, matmul=None, error=dict(GPU_LOST[doc["backend"]]))
        doc["xid"] = {"supported": True, "events": [{"type": "xid", "xid": 79}], "gpu_lost": True}
        return doc
    nonce = re.search(r"--nonce (\d+)", command)
    if nonce is not None and doc["ok"]:
        doc["matmul"] = _sampled(doc["matmul"], int(nonce.group(1)))
    facts = host_facts(market.scenario.seed, inst)
    doc |= {k: dict(facts[k]) for k, off in CHECK_OFF.items() if off not in command}
    if "--net-url" in command:
        doc["net"] = {"url": "sim", "mb": 50.0, "mbps": facts["net_mbps"]}
    doc["xid"] = {"supported": True, "events": [], "gpu_lost": False}
    return doc


MATMUL_N = 4096


def preflight_answer(gpu: dict[str, Any], backend: str, rate: float) -> dict[str, Any]:
    """What probes/preflight.py prints on a GPU in this state (same schema), its matmul run at
    `rate` TFLOP/s: bfloat16 on torch, float32 on the driver path."""
    doc: dict[str, Any] = {
        "schema": 1,
        "probe": "preflight",
        "backend": backend,
        "ok": gpu["cuda_works"],
        "device": {
            "name": gpu["name"],
            "driver_version": gpu["driver_version"],
            "cuda_version": gpu["cuda_version"],
            "total_memory_mb": gpu["vram_mb"],
        },
    }
    if not gpu["cuda_works"]:
        no_cuda = dict(NO_CUDA[backend])
        return doc | {"error": no_cuda, "steps": {"cuda_init_s": 1.9}, "total_s": 2.1}
    torch = backend == "torch"
    secs = 2 * MATMUL_N**3 * 10 / (rate * 1e12)  # ten timed iterations, as the probe runs
    matmul = {
        "n": MATMUL_N,
        "dtype": "bfloat16" if torch else "float32",
        "iters": 10,
        "seconds": round(secs, 6),
        "tflops": round(rate, 2 if torch else 3),
        "max_rel_err": 0.0021 if torch else 0.0,
        "result_ok": True,
    }
    steps = {"cuda_init_s": 1.2, "alloc_s": 0.05, "warmup_s": 0.3, "timed_s": round(secs, 4)}
    return doc | {
        "matmul": matmul,
        "steps": steps | {"check_s": 0.4},
        "total_s": round((1.95 if torch else 1.4) + secs, 3),
        "error": None,
    }


def _sampled(mm: dict[str, Any], nonce: int) -> dict[str, Any]:
    """The matmul section with the result entries `nonce` picks."""
    n = mm["n"]
    at = sample_positions(nonce, n)
    return mm | {"nonce": nonce, "samples": [[r, c, float(exact_entry(n, r, c))] for r, c in at]}


_REASON_BITS = {
    "gpu_idle": 0x1,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}
# the GPU's state (`SimMarket.gpu_state`) that the NVML sampler does not print as it is
UNSAMPLED = ("cuda_version", "cuda_works", "tflops", "vram_mb", "throttle_reasons")


def nvml_document(market: SimMarket, inst: SimInstance, now: float) -> dict[str, Any]:
    """What probes/nvml_sample.py prints for one sample on this host at `now`: the link as the
    host has it (an idle card parks it at gen 1 to save power; under load it comes up); after the
    fatal XID, what the real sampler prints when NVML says the GPU is lost."""
    if _lost(market, inst, now):
        return {
            "schema": 1,
            "probe": "nvml_sample",
            "ok": True,
            "samples": [],
            "xid": {"supported": None, "events": [], "gpu_lost": True},
        }
    gpu = market.gpu_state(inst, now)
    pcie = host_facts(market.scenario.seed, inst)["pcie"]
    sample = {k: v for k, v in gpu.items() if k not in UNSAMPLED}
    sample |= {f"pcie_{k}": pcie[k] for k in ("width", "max_gen", "max_width")}
    sample |= {
        "t": now,
        "index": 0,
        "mem_util": gpu["util"] // 2,
        "reasons_bits": sum(_REASON_BITS.get(r, 0) for r in set(gpu["throttle_reasons"])),
        "reasons": list(gpu["throttle_reasons"]),
        "pcie_gen": pcie["gen"] if gpu["util"] > 0 else 1,
    }
    return {"schema": 1, "probe": "nvml_sample", "ok": True, "samples": [sample]}
