"""A simulated GPU's vital signs (what `probes/nvml_sample.py` would read), drawn from the card's
model and the host's state: idle, at work, or throttled (thermal: hot, fans flat out; power cap:
drawing at a lowered limit). Board power is NVIDIA's per model (docs/fidelity.md); ECC and fan
readings are null where NVML says NotSupported."""

from __future__ import annotations

from typing import Any

from .machines import keyed_rng

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
