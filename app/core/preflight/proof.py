"""The preflight's proof of work, checked on the controller.

Hosts whose every CUDA call failed printed forged documents and were verified. The inputs have a
closed form (probes/preflight.py), so each run carries a fresh nonce, the probe reports the
product's entries at the positions it picks, and the controller computes them itself. Where the
entries were computed it cannot prove: a careful forger is caught by its speed
(`MAX_SPEED_SHARE`). The position picker is the probe's own, kept equal by
`tests/test_preflight_proof.py`."""

from __future__ import annotations

import math
from typing import Any

SAMPLES = 8
# a dense bf16 matmul measures under its model's datasheet rate; well above it is a lie or
# another card, and either way not a measurement to trust a host on
MAX_SPEED_SHARE = 1.3
BF16_REL_TOL = 0.02  # torch's bf16 output rounding stays well inside 2% (the probe's own)


def sample_positions(nonce: int, n: int, k: int = SAMPLES) -> list[tuple[int, int]]:
    """The (row, column) entries of C a run with this nonce reports (the probe's LCG)."""
    out = []
    x = nonce % 2**31
    for _ in range(k):
        x = (1103515245 * x + 12345) % 2**31
        r = x % n
        x = (1103515245 * x + 12345) % 2**31
        out.append((r, x % n))
    return out


def exact_entry(n: int, r: int, c: int) -> int:
    """C[r, c] of the preflight's inputs, exactly."""
    return sum(((r + k) % 7 - 3) * ((k + 2 * c) % 5 - 2) for k in range(n))


def check_samples(mm: dict[str, Any], nonce: int, backend: str) -> str | None:
    """None when the entries are the product's at this nonce's positions; else what is wrong. The
    driver path's fp32 sums are integers under 2^24, so exact; torch's bf16 may round."""
    n = mm.get("n")
    if type(n) is not int or not 2 <= n <= 65536:
        return "no usable matrix size"
    if mm.get("nonce") != nonce:
        return "it does not answer this run's nonce"
    samples = mm.get("samples")
    if not isinstance(samples, list) or len(samples) != SAMPLES:
        return f"it reports {len(samples) if isinstance(samples, list) else 'no'} entries"
    for (r, c), got in zip(sample_positions(nonce, n), samples, strict=True):
        if not isinstance(got, list) or len(got) != 3 or got[:2] != [r, c]:
            return f"it names other entries than C[{r},{c}]"
        v = got[2]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return f"C[{r},{c}] is not a number"
        want = exact_entry(n, r, c)
        off = abs(v - want)
        if (off != 0) if backend == "driver" else off > BF16_REL_TOL * max(1.0, abs(want)):
            return f"C[{r},{c}] is {v:g}, the product's is {want}"
    return None
