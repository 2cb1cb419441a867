"""What the probes print on a simulated host beyond the matmul: the deeper checks, the driver path,
a shell without python3, an `xid_mid_job` XID. Pure; drawn per rental, so repeated probes of one
instance agree."""

from __future__ import annotations

import re
from typing import Any

from ..core.preflight.checks import link_gbps
from ..core.preflight.gpu_specs import expected_tflops, spec_for
from ..core.preflight.proof import exact_entry, sample_positions
from .images import ImageSpec
from .machines import keyed_rng

NO_PYTHON_STDERR = b"bash: line 1: python3: command not found\n"
NO_PYTHON_EXIT = 127


def host_facts(
    behaviour: str,
    seed: int,
    machine_id: int,
    rental: int,
    real_gpu: str,
    offer: dict[str, Any],
    disk_gb: float,
) -> dict[str, Any]:
    """What this rental's checks measure: near the offer's if healthy, far under if faulty."""
    rng = keyed_rng(seed, machine_id, rental, "checks")
    spec = spec_for(real_gpu)
    gen, width = (spec.pcie_gen, spec.pcie_width) if spec else (4, 16)
    cur_gen, cur_width = gen, width
    if behaviour == "narrow_pcie":
        # a mining riser: x1, often on an older generation slot
        cur_gen, cur_width = rng.choice([(3, 1), (2, 1), (gen, 1), (3, 2)])
    h2d = link_gbps(cur_gen, cur_width) * rng.uniform(0.85, 1.0)
    gpu_ram = float(offer.get("gpu_ram") or 24576)
    total_mb = int(gpu_ram)
    share = rng.uniform(0.45, 0.7) if behaviour == "short_vram" else 1.0
    # the context and the probe's reserve take ~0.5 GB off a healthy card
    allocated = int(gpu_ram * share) - rng.randint(420, 560)
    disk_bw = float(offer.get("disk_bw") or 2000.0)
    free_gb = disk_gb * rng.uniform(0.9, 0.98)
    write = disk_bw * rng.uniform(0.4, 0.9)
    if behaviour == "slow_disk":
        if rng.random() < 0.5:
            write = disk_bw * rng.uniform(0.02, 0.08)  # a tired SATA disk behind an "nvme" offer
        else:
            free_gb = disk_gb * rng.uniform(0.2, 0.45)  # the volume is smaller than allocated
    inet = float(offer.get("inet_down") or 500.0)
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


def xid_at(
    behaviour: str, running_at: float | None, knobs: dict[str, Any], key: Any
) -> float | None:
    """When an `xid_mid_job` host's GPU falls off the bus (market time), else None."""
    if behaviour != "xid_mid_job" or running_at is None:
        return None
    lo, hi = knobs.get("xid_after_min", [8.0, 30.0])
    return running_at + keyed_rng(key, "xid").uniform(lo, hi) * 60


def preflight_document(
    base: dict[str, Any],
    facts: dict[str, Any],
    image: ImageSpec,
    gpu: dict[str, Any],
    real_gpu: str,
    command: str,
    lost: bool,
    forged_as: str | None = None,
) -> dict[str, Any]:
    """The preflight's document on this host (torch, or the driver path's) with the deeper checks'
    sections and the entries the `--nonce` picks. `forged_as`: a host whose CUDA calls fail,
    replaying a good run's document (its nonce is not this run's)."""
    if forged_as is not None:
        return _forged_document(base, forged_as)
    doc = {**base, "backend": "torch"}
    if not image.torch:
        doc = _driver_document(base, gpu, real_gpu)
    nonce = re.search(r"--nonce (\d+)", command)
    if nonce is not None and isinstance(doc.get("matmul"), dict) and doc.get("ok") and not lost:
        mm = doc["matmul"] = dict(doc["matmul"])
        n, at = mm["n"], sample_positions(int(nonce.group(1)), mm["n"])
        mm["nonce"] = int(nonce.group(1))
        mm["samples"] = [[r, c, float(exact_entry(n, r, c))] for r, c in at]
    if lost:
        doc.update(
            ok=False,
            matmul=None,
            error={
                "type": "CudaError" if doc.get("backend") == "driver" else "RuntimeError",
                "message": "cuInit failed: CUDA_ERROR_NO_DEVICE (100)"
                if doc.get("backend") == "driver"
                else "CUDA error: no CUDA-capable device is detected",
            },
        )
        doc["xid"] = {"supported": True, "events": [{"type": "xid", "xid": 79}], "gpu_lost": True}
        return doc
    if doc.get("device") is None:
        return doc
    if "--pcie-mb 0" not in command:
        doc["pcie"] = dict(facts["pcie"])
    if "--no-vram" not in command:
        doc["vram"] = dict(facts["vram"])
    if "--disk-mb -1" not in command:
        doc["disk"] = dict(facts["disk"])
    if "--net-url" in command:
        doc["net"] = {"url": "sim", "mb": 50.0, "mbps": facts["net_mbps"]}
    doc["xid"] = {"supported": True, "events": [], "gpu_lost": False}
    return doc


def matmul(n: int, dtype: str, seconds: float, tflops: float, err: float) -> dict[str, Any]:
    """A preflight document's matmul section (ten timed iterations, as probes/preflight.py runs)."""
    return {
        "n": n,
        "dtype": dtype,
        "iters": 10,
        "seconds": round(seconds, 6),
        "tflops": tflops,
        "max_rel_err": err,
        "result_ok": True,
    }


def _forged_document(base: dict[str, Any], gpu: str) -> dict[str, Any]:
    rate = round((expected_tflops(gpu) or 60.0) * 1.41, 2)
    n = 4096
    replayed = 1234567  # the nonce of the run it was copied from
    return {
        **base,
        "backend": "torch",
        "ok": True,
        "error": None,
        "device": {**(base.get("device") or {}), "name": gpu},
        "matmul": {
            **matmul(n, "bfloat16", 2 * n**3 * 10 / (rate * 1e12), rate, 0.0021),
            "nonce": replayed,
            "samples": [
                [r, c, float(exact_entry(n, r, c))] for r, c in sample_positions(replayed, n)
            ],
        },
        "xid": {"supported": True, "events": [], "gpu_lost": False},
    }


def _driver_document(base: dict[str, Any], gpu: dict[str, Any], real_gpu: str) -> dict[str, Any]:
    doc = {k: v for k, v in base.items() if k != "matmul"}
    doc["backend"] = "driver"
    if not gpu.get("cuda_works", True):
        doc["ok"] = False
        doc["error"] = {
            "type": "CudaError",
            "message": "cuInit failed: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)",
        }
        return doc
    spec = spec_for(real_gpu)
    share = gpu["tflops"] / spec.bf16_tflops if spec and spec.bf16_tflops else 1.0
    rate = (expected_tflops(real_gpu, "driver") or 2.0) * share
    n = 4096
    seconds = 2 * n**3 * 10 / (rate * 1e12)
    doc["matmul"] = matmul(n, "float32", seconds, round(rate, 3), 0.0)
    doc["ok"], doc["error"] = True, None
    doc["steps"] = {**base.get("steps", {}), "timed_s": round(seconds, 4)}
    doc["total_s"] = round(1.4 + seconds, 3)
    return doc


def nvml_document(base: dict[str, Any], facts: dict[str, Any], lost: bool) -> dict[str, Any]:
    """The NVML sampler's document: the link as this host has it; after the fatal XID, what
    the real sampler prints when NVML says the GPU is lost."""
    if lost:
        return {
            "schema": 1,
            "probe": "nvml_sample",
            "ok": True,
            "samples": [],
            "xid": {"supported": None, "events": [], "gpu_lost": True},
        }
    doc = dict(base)
    pcie = facts["pcie"]
    samples = []
    for s in doc.get("samples", []):
        busy = (s.get("util") or 0) > 0
        samples.append(
            {
                **s,
                # an idle card parks its link at gen 1 to save power; under load it comes up
                "pcie_gen": pcie["gen"] if busy else 1,
                "pcie_width": pcie["width"],
                "pcie_max_gen": pcie["max_gen"],
                "pcie_max_width": pcie["max_width"],
            }
        )
    doc["samples"] = samples
    return doc
