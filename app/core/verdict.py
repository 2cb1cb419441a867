"""Reading probe results: the preflight verdict and throttle detection (controller side)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .gpu_specs import expected_tflops, same_model

PROBE_SCHEMA = 1


@dataclass(frozen=True)
class Verdict:
    ok: bool
    failure_class: str | None  # cuda_error, wrong_result, too_slow, wrong_gpu, bad_probe
    reason: str
    tflops: float | None = None
    expected: float | None = None


def preflight_verdict(
    result: Any, offer_gpu: str, min_share: float, check_name: bool = True
) -> Verdict:
    """Judge a validated preflight document against the offer's GPU model."""
    if (
        not isinstance(result, dict)
        or result.get("probe") != "preflight"
        or result.get("schema") != PROBE_SCHEMA
    ):
        return Verdict(False, "bad_probe", "preflight output is not a preflight document")
    if not result.get("ok"):
        err = result.get("error") or {}
        if not isinstance(err, dict):
            err = {}
        return Verdict(
            False,
            "cuda_error",
            f"preflight failed: {str(err.get('type', 'error'))[:80]}: {str(err.get('message', ''))[:300]}",
        )
    mm = result.get("matmul")
    device = result.get("device")
    if not isinstance(mm, dict) or not isinstance(device, dict):
        return Verdict(False, "bad_probe", "preflight output lacks matmul or device")
    if mm.get("result_ok") is not True:
        return Verdict(
            False, "wrong_result", f"matmul result is wrong (max rel err {mm.get('max_rel_err')})"
        )
    tflops = mm.get("tflops")
    if not isinstance(tflops, int | float) or isinstance(tflops, bool) or not 0 <= tflops < 1e5:
        return Verdict(False, "bad_probe", "preflight reported no usable TFLOP/s")
    name = str(device.get("name", ""))[:120]
    if check_name and name and not same_model(offer_gpu, name):
        return Verdict(
            False, "wrong_gpu", f"offer says {offer_gpu}, NVML says {name}", float(tflops)
        )
    expected = expected_tflops(offer_gpu)
    if expected and tflops < expected * min_share:
        return Verdict(
            False,
            "too_slow",
            f"{tflops:.1f} TFLOP/s is {tflops / expected:.0%} of a {offer_gpu}'s {expected:.0f}",
            float(tflops),
            expected,
        )
    share = f" ({tflops / expected:.0%} of expected)" if expected else ""
    return Verdict(
        True, None, f"bf16 matmul checked, {tflops:.1f} TFLOP/s{share}", float(tflops), expected
    )


# Clock event reasons that mean the GPU is being held back (GpuIdle and app clocks are not).
THROTTLE_NAMES = frozenset(
    {
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "sync_boost",
    }
)


@dataclass(frozen=True)
class Throttle:
    throttled: bool
    slowdown: float  # 0.22 means running 22% below max clock
    reasons: tuple[str, ...]
    reason: str


def detect_throttle(
    samples: Sequence[dict[str, Any]],
    ratio: float = 0.85,
    min_util: float = 50.0,
    min_share: float = 0.6,
) -> Throttle:
    """Throttling: under load, the SM clock sits below `ratio` of max with a throttle reason set,
    in at least `min_share` of the loaded samples. Idle samples never count."""
    loaded = []
    for s in samples:
        util, clock, top = (_number(s.get(k)) for k in ("util", "sm_clock", "max_sm_clock"))
        if util is None or clock is None or top is None or util < min_util or top <= 0:
            continue
        raw = s.get("reasons")
        names = {r for r in raw if isinstance(r, str)} if isinstance(raw, list | tuple) else set()
        loaded.append((clock, top, names & THROTTLE_NAMES))
    if not loaded:
        return Throttle(False, 0.0, (), "no samples under load")
    slow = [(clock, top, names) for clock, top, names in loaded if clock < ratio * top and names]
    if len(slow) < min_share * len(loaded):
        return Throttle(
            False,
            0.0,
            (),
            f"clocks fine in {len(loaded) - len(slow)} of {len(loaded)} loaded samples",
        )
    drop = 1 - sum(clock / top for clock, top, _ in slow) / len(slow)
    reasons = tuple(sorted({r for _, _, names in slow for r in names}))
    return Throttle(
        True, drop, reasons, f"SM clock {drop:.0%} below max under load ({', '.join(reasons)})"
    )


def _number(value: Any) -> float | None:
    """A finite number from a host's document; anything else (bool, text, NaN) is no number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
