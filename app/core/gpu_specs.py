"""What each GPU model should do: the one table the preflight verdict reads.

`bf16_tflops` is a dense bf16 matmul rate a healthy card of that model reaches in a 4096^3
torch matmul (measured figures where known, otherwise ~70% of the datasheet's dense rate).
`vram_mb` is the card's memory. The simulator draws its machines' real speeds from it too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    bf16_tflops: float
    vram_mb: int
    typical_dph: float


GPU_SPECS: dict[str, GpuSpec] = {
    s.name: s
    for s in (
        GpuSpec("RTX 3060", 24.0, 12288, 0.08),
        GpuSpec("RTX 3070", 38.0, 8192, 0.10),
        GpuSpec("RTX 3080", 52.0, 10240, 0.14),
        GpuSpec("RTX 3090", 64.0, 24576, 0.20),
        GpuSpec("RTX 4070", 55.0, 12288, 0.15),
        GpuSpec("RTX 4080", 95.0, 16384, 0.28),
        GpuSpec("RTX 4090", 150.0, 24576, 0.40),
        GpuSpec("RTX 5090", 200.0, 32768, 0.65),
        GpuSpec("RTX A4000", 35.0, 16384, 0.15),
        GpuSpec("RTX A5000", 50.0, 24576, 0.22),
        GpuSpec("RTX A6000", 72.0, 49152, 0.45),
        GpuSpec("L40S", 180.0, 46068, 0.75),
        GpuSpec("A100 SXM4", 230.0, 81920, 1.10),
        GpuSpec("H100 SXM", 600.0, 81559, 2.20),
        GpuSpec("H200", 650.0, 143771, 2.90),
    )
}

# A card measuring below this share of its model's rate is not the card the offer claims.
MIN_SPEED_SHARE = 0.6


def expected_tflops(gpu_name: str) -> float | None:
    """Expected bf16 TFLOP/s for a GPU name as the API or NVML spells it, None if unknown."""
    name = gpu_name.replace("NVIDIA", "").replace("GeForce", "").strip()
    spec = GPU_SPECS.get(name)
    if spec is None:
        for key, candidate in GPU_SPECS.items():
            if key.lower() == name.lower():
                spec = candidate
                break
    return spec.bf16_tflops if spec else None


def same_model(offer_name: str, reported_name: str) -> bool:
    """Whether NVML's device name is the model the offer advertised (vendor prefixes ignored)."""

    def norm(n: str) -> str:
        return " ".join(n.replace("NVIDIA", "").replace("GeForce", "").lower().split())

    return norm(offer_name) == norm(reported_name)


# Vast's dlperf score runs at roughly a third of a card's bf16 matmul TFLOP/s; an offer whose own
# score is below half of what its claimed model gets is not that model.
DLPERF_PER_TFLOP = 1 / 3


def offer_contradicts_itself(gpu_name: str, dlperf: float | None) -> bool:
    expected = expected_tflops(gpu_name)
    if expected is None or dlperf is None or dlperf <= 0:
        return False
    return dlperf < 0.5 * expected * DLPERF_PER_TFLOP


# The oldest driver branch each CUDA runtime needs (NVIDIA's CUDA toolkit release notes).
MIN_DRIVER_FOR_CUDA = (
    (12.8, 570),
    (12.6, 560),
    (12.5, 555),
    (12.4, 550),
    (12.3, 545),
    (12.2, 535),
    (12.1, 530),
    (12.0, 525),
    (11.8, 520),
)


def driver_too_old(driver_version: str | None, image_cuda: float) -> bool:
    """True when the offer's own driver cannot run an image built for `image_cuda`."""
    if not driver_version or image_cuda <= 0:
        return False
    try:
        branch = int(driver_version.split(".")[0])
    except ValueError:
        return False
    for cuda, need in MIN_DRIVER_FOR_CUDA:
        if image_cuda >= cuda:
            return branch < need
    return False
