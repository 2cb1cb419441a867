"""What each GPU model should do: the one table the preflight verdict and the simulator read, names
spelled as Vast's offers spell them.

`bf16_tflops` is a dense bf16 4096^3 matmul rate a healthy card reaches (measured where known,
else ~70% of the datasheet). Sources: A100 312 (NVIDIA A100 datasheet, via
glennklockwood.com/garden/processors/A100), L40S 362.05 and L40 181.05 (NVIDIA's datasheet
tables, reproduced at mullet.se/product.html?product_id=355414); the others NVIDIA's
architecture whitepapers, not re-verified (docs/fidelity.md). `DPH_RANGE` holds each model's
$/h on Vast, with its sources."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..text import clean


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str
    bf16_tflops: float
    vram_mb: int
    fp32_tflops: float = 0.0
    pcie_gen: int = 4
    pcie_width: int = 16


# The models the simulator lists and draws from. Order matters to the simulator's seeded draws
# (a misreported machine picks a slower model from this list), so new models go to the end or
# into OTHER_SPECS.
GPU_SPECS: dict[str, GpuSpec] = {
    s.name: s
    for s in (
        GpuSpec("RTX 3060", 24.0, 12288, 12.7),
        GpuSpec("RTX 3070", 38.0, 8192, 20.3),
        GpuSpec("RTX 3080", 52.0, 10240, 29.8),
        GpuSpec("RTX 3090", 64.0, 24576, 35.6),
        GpuSpec("RTX 4070", 55.0, 12288, 29.1),
        GpuSpec("RTX 4080", 95.0, 16384, 48.7),
        GpuSpec("RTX 4090", 150.0, 24576, 82.6),
        GpuSpec("RTX 5090", 200.0, 32768, 104.8, 5),
        GpuSpec("RTX A4000", 35.0, 16384, 19.2),
        GpuSpec("RTX A5000", 50.0, 24576, 27.8),
        GpuSpec("RTX A6000", 72.0, 49152, 38.7),
        # 362 TFLOP/s dense bf16 on the datasheet; ~69% of dense in a 4096^3 matmul, as the
        # other datacenter rows here
        GpuSpec("L40S", 250.0, 46068, 91.6),
        GpuSpec("A100 SXM4", 230.0, 81920, 19.5),
        GpuSpec("H100 SXM", 600.0, 81559, 67.0, 5),
        GpuSpec("H200", 650.0, 143771, 67.0, 5),
        # a PCIe A100 is power-capped at 250-300 W: ~0.64 of the dense 312 TFLOP/s datasheet
        GpuSpec("A100 PCIE", 200.0, 40960, 19.5),
    )
}

# Further models Vast offers name (its gpu_name spellings); the verdict knows them, the
# simulator does not list them unless a scenario names them.
OTHER_SPECS: dict[str, GpuSpec] = {
    s.name: s
    for s in (
        GpuSpec("RTX 3060 Ti", 31.0, 8192, 16.2),
        GpuSpec("RTX 3080 Ti", 58.0, 12288, 34.1),
        GpuSpec("RTX 3090 Ti", 70.0, 24576, 40.0),
        GpuSpec("RTX 4060 Ti", 33.0, 16384, 22.1, 4, 8),
        GpuSpec("RTX 4070 Ti", 70.0, 12288, 40.1),
        GpuSpec("RTX 4000Ada", 50.0, 20480, 26.7),
        GpuSpec("RTX 6000Ada", 190.0, 49152, 91.1),
        GpuSpec("A10", 75.0, 24576, 31.2),
        GpuSpec("A40", 100.0, 46068, 37.4),
        GpuSpec("L4", 60.0, 23034, 30.3),
        GpuSpec("L40", 140.0, 46068, 90.5),
        GpuSpec("H100 PCIE", 450.0, 81559, 51.2, 5),
        GpuSpec("H100 NVL", 520.0, 95830, 60.0, 5),
    )
}

# $/h one GPU of each model rents for on Vast (single-GPU offers, 2026), low to high: what the
# simulator's markets draw prices from. Sources, where a figure was published:
#   [F] fairlane.systems/en/wissen/tool-vast-ai, "As of 2026-05": RTX 3090 from $0.18
#       (interruptible), RTX 4090 $0.31-0.45, RTX A6000 from $0.55, A100-40GB from $0.40
#       (interruptible), A100-80GB $0.78-1.20, H100-80GB $1.85-2.50, H200 from $3.50
#   [U] usagepricing.com/blueprint/vast-ai, captured June 2026: RTX 4090 $0.682-0.875,
#       RTX 5090 $0.865-1.141, A100 80GB $1.166-1.205, H100 NVL $2.525
#   [C] chrisgmartin's Vast.ai notes, "Hardware & Tiers": RTX 3090 $0.20-0.30
#   [D] deploybase.ai/articles/h100-vastai: H100 $2.50-4.00 (mean $3.15)
#   [S] dstack issue #4026: RTX 4090 ~$0.24 on-demand, ~$0.12 bid floor
#   [E] our estimate (no published Vast figure found): placed between the sourced models by
#       speed and VRAM, cheap slow cards dearer per TFLOP as the sourced ones are
# The sources disagree (live snapshots, months apart): a range spans the lower quotes, where
# community offers sit, not the dearest snapshot.
DPH_RANGE: dict[str, tuple[float, float]] = {
    "RTX 3060": (0.10, 0.16),  # [E]
    "RTX 3070": (0.12, 0.20),  # [E]
    "RTX 3080": (0.16, 0.26),  # [E]
    "RTX 3090": (0.18, 0.30),  # [F] [C]
    "RTX 4070": (0.16, 0.26),  # [E]
    "RTX 4080": (0.24, 0.38),  # [E]
    "RTX 4090": (0.31, 0.45),  # [F] [S]; [U]'s 0.68-0.88 is a dearer snapshot
    "RTX 5090": (0.45, 0.90),  # [U] 0.87-1.14 at its top; [E] below it
    "RTX A4000": (0.12, 0.20),  # [E]
    "RTX A5000": (0.20, 0.32),  # [E]
    "RTX A6000": (0.45, 0.65),  # [F] from 0.55
    "L40S": (0.55, 0.90),  # [E]
    "L40": (0.50, 0.80),  # [E]
    "A40": (0.35, 0.55),  # [E]
    "A10": (0.20, 0.35),  # [E]
    "L4": (0.20, 0.35),  # [E]
    "A100 PCIE": (0.40, 0.90),  # [F] 40 GB from 0.40
    "A100 SXM4": (0.78, 1.20),  # [F] 80 GB; [U] 1.17-1.21
    "H100 PCIE": (1.60, 2.40),  # [E] under the SXM's
    "H100 SXM": (1.85, 3.15),  # [F] 1.85-2.50; [D] 2.50-4.00, mean 3.15
    "H100 NVL": (2.10, 2.60),  # [U] 2.525
    "H200": (3.50, 4.50),  # [F] from 3.50
}


# The torch-free preflight's kernel is a plain FP32 loop (no tensor cores, no tiling): it is
# memory-bound and reaches a small share of the FP32 datasheet rate. An estimate, not measured
# on every model (docs/benchmarks.md): the verdict holds it to a loose share for that reason.
DRIVER_KERNEL_SHARE = 0.08


# the offer book checks every offer's model at every poll: the same few names, cleaned once each
@lru_cache(maxsize=4096)
def _norm(name: str) -> str:
    # the market's and the host's spellings are both foreign text: compared as shown, cleaned
    # (escapes and invisible characters out), so a name carrying an escape is still its GPU
    n = clean(name, 200).replace("NVIDIA", "").replace("GeForce", "").replace("Tesla", "")
    return " ".join(n.lower().replace("-", " ").split())


# NVML's spellings that differ from Vast's beyond case and vendor prefixes.
_ALIASES = {
    "a100 pcie 40gb": "A100 PCIE",
    "a100 pcie 80gb": "A100 PCIE",
    "a100 80gb pcie": "A100 PCIE",
    "a100 sxm4 40gb": "A100 SXM4",
    "a100 sxm4 80gb": "A100 SXM4",
    "h100 80gb hbm3": "H100 SXM",
    "h100 pcie": "H100 PCIE",
    "rtx 6000 ada generation": "RTX 6000Ada",
    "rtx 4000 ada generation": "RTX 4000Ada",
}


# the tables by their names as `_norm` spells them (the first of a spelling wins): the offer
# book looks a model up for every offer at every poll
_BY_NORM: dict[str, GpuSpec] = {}
for _name, _spec in (*GPU_SPECS.items(), *OTHER_SPECS.items()):
    _BY_NORM.setdefault(_norm(_name), _spec)


def spec_for(gpu_name: str) -> GpuSpec | None:
    """The spec for a GPU name as the API or NVML spells it (prefixes, case, dashes ignored), or
    None."""
    key = _norm(gpu_name)
    if key in _BY_NORM:
        return _BY_NORM[key]
    alias = _ALIASES.get(key, "")
    return GPU_SPECS.get(alias) or OTHER_SPECS.get(alias)


def expected_tflops(gpu_name: str, backend: str = "torch") -> float | None:
    """Expected TFLOP/s of the preflight's matmul on this model: bf16 through torch, or the
    driver path's FP32 kernel (`backend="driver"`); None if the model is unknown."""
    spec = spec_for(gpu_name)
    if spec is None:
        return None
    if backend == "driver":
        return spec.fp32_tflops * DRIVER_KERNEL_SHARE if spec.fp32_tflops else None
    return spec.bf16_tflops


def same_model(offer_name: str, reported_name: str) -> bool:
    """Whether NVML's device name is the model the offer advertised (vendor prefixes ignored,
    NVML's memory-size suffixes resolved through the spec table)."""
    a, b = _norm(offer_name), _norm(reported_name)
    if a == b:
        return True
    left, right = spec_for(offer_name), spec_for(reported_name)
    return left is not None and left is right


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
