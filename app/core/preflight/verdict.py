"""Reading probe results on the controller: the preflight verdict and throttle detection. A missing
section, an unsupported NVML field or hostile values give `ok=None`, which never kills."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .gpu_specs import expected_tflops, same_model
from .proof import MAX_SPEED_SHARE, check_samples

PROBE_SCHEMA = 1


@dataclass(frozen=True)
class Verdict:
    ok: bool
    failure_class: str | None  # cuda_error, wrong_result, too_slow, wrong_gpu, bad_probe
    reason: str
    tflops: float | None = None
    expected: float | None = None


def preflight_verdict(
    result: Any,
    offer_gpu: str,
    min_share: float,
    check_name: bool = True,
    checks: CheckPolicy | None = None,
    nonce: int | None = None,
) -> Verdict:
    """Judge a validated preflight document against the offer's GPU model. The driver path
    (`backend: "driver"`) is held to the driver kernel's expected speed; with the `nonce` the
    product's entries are checked, and a bf16 speed well above the model's is not believed."""
    checks = checks or CheckPolicy()
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
        said = f"{_text(err.get('type', 'error'), 80)}: {_text(err.get('message', ''), 300)}"
        return Verdict(False, "cuda_error", f"preflight failed: {said}")
    mm = result.get("matmul")
    device = result.get("device")
    if not isinstance(mm, dict) or not isinstance(device, dict):
        return Verdict(False, "bad_probe", "preflight output lacks matmul or device")
    if mm.get("result_ok") is not True:
        err = finite(mm.get("max_rel_err"))
        shown = "unknown" if err is None else f"{err:.3g}"
        return Verdict(False, "wrong_result", f"matmul result is wrong (max rel err {shown})")
    tflops = finite(mm.get("tflops"))
    if tflops is None or not 0 <= tflops < 1e5:
        return Verdict(False, "bad_probe", "preflight reported no usable TFLOP/s")
    backend = "driver" if result.get("backend") == "driver" else "torch"
    if nonce is not None:
        why = check_samples(mm, nonce, backend)
        if why is not None:
            return Verdict(False, "wrong_result", f"the matmul's proof does not check out: {why}")
    name = _text(device.get("name", ""), 120)
    if check_name and name and not same_model(offer_gpu, name):
        said = f"offer says {offer_gpu}, NVML says {name}"
        return Verdict(False, "wrong_gpu", said, float(tflops))
    if backend == "driver":
        min_share = checks.driver_min_speed_share
    expected = expected_tflops(offer_gpu, backend)
    too_fast = backend == "torch" and tflops > (expected or math.inf) * MAX_SPEED_SHARE
    too_fast = too_fast and nonce is not None
    if expected and (too_fast or tflops < expected * min_share):
        said = f"{tflops:.1f} TFLOP/s is {tflops / expected:.0%} of a {offer_gpu}'s {expected:.0f}"
        if too_fast:
            return Verdict(False, "bad_probe", f"{said}: not believable", float(tflops), expected)
        return Verdict(False, "too_slow", said, float(tflops), expected)
    share = f" ({tflops / expected:.0%} of expected)" if expected else ""
    what = (
        "fp32 matmul checked (driver API, no torch)"
        if backend == "driver"
        else "bf16 matmul checked"
    )
    return Verdict(True, None, f"{what}, {tflops:.1f} TFLOP/s{share}", float(tflops), expected)


@dataclass(frozen=True)
class CheckPolicy:
    """Settings of the deeper checks (the supervisor's `Policy` is to hold one).
    On by default where the check costs the preflight a few seconds at most."""

    driver_min_speed_share: float = 0.3  # the driver path's kernel speed is an estimate: loose
    pcie: bool = True
    pcie_min_width: int = 4  # x1/x2 risers (mining rigs) fail; x4 chipset slots pass
    pcie_min_bw_share: float = 0.2  # measured H2D against the model's full link
    vram: bool = True
    vram_min_share: float = 0.9  # allocatable against the offer's gpu_ram (context eats ~0.5 GB)
    disk: bool = True
    disk_min_free_share: float = 0.5  # free against the disk asked for (image layers use some)
    disk_min_write_share: float = 0.2  # fsync'd write MB/s against the offer's disk_bw
    net: bool = True
    net_min_share: float = 0.1  # measured download Mb/s against the offer's inet_down
    xid: bool = True


# NVML clock event reasons (nvml.h, nvmlClocksEventReason*), grouped by what they mean to a
# renter. Hardware slowdown, hardware thermal and power-brake are the board protecting itself:
# they count whenever seen under load. A software thermal cap counts when it lasts. The software
# power cap is the card working as designed at its power limit: it counts only with a clock drop
# under load. GPU idle, application clocks, display clocks and sync boost are never a fault.
HARD_THROTTLE = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})
SOFT_THROTTLE = frozenset({"sw_thermal_slowdown", "sw_power_cap"})
THROTTLE_NAMES = HARD_THROTTLE | SOFT_THROTTLE


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
    """Throttling, sustained: in at least `min_share` of the samples under load, a hardware reason,
    or a software one with the SM clock below `ratio` of max. Idle samples never count."""
    loaded = []
    for s in samples if isinstance(samples, list | tuple) else ():
        if not isinstance(s, dict):
            continue  # a host's list may hold anything
        util, clock, top = (finite(s.get(k)) for k in ("util", "sm_clock", "max_sm_clock"))
        if util is None or clock is None or top is None or util < min_util or top <= 0:
            continue
        raw = s.get("reasons")
        names = {r for r in raw if isinstance(r, str)} if isinstance(raw, list | tuple) else set()
        loaded.append((clock, top, names & THROTTLE_NAMES))
    if not loaded:
        return Throttle(False, 0.0, (), "no samples under load")
    slow = [
        (clock, top, names)
        for clock, top, names in loaded
        if names & HARD_THROTTLE or (names & SOFT_THROTTLE and clock < ratio * top)
    ]
    if not slow or len(slow) < min_share * len(loaded):
        why = f"clocks fine in {len(loaded) - len(slow)} of {len(loaded)} loaded samples"
        return Throttle(False, 0.0, (), why)
    drop = max(0.0, 1 - sum(clock / top for clock, top, _ in slow) / len(slow))
    reasons = tuple(sorted({r for _, _, names in slow for r in names}))
    why = f"SM clock {drop:.0%} below max under load ({', '.join(reasons)})"
    return Throttle(True, drop, reasons, why)


def _text(value: Any, limit: int) -> str:
    """A scalar from a host's document as text, cut short; a list or object is named, not walked."""
    if isinstance(value, list | dict | tuple):
        return f"<{type(value).__name__}>"
    try:
        return str(value)[:limit]
    except ValueError:  # an integer past Python's 4,300-digit limit for str()
        return f"<{type(value).__name__}>"


def finite(value: Any) -> float | None:
    """A host's value as a finite float, or None: bools, text, NaN, infinities and integers
    past a float's range (math.isfinite raises OverflowError on those) are no number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
