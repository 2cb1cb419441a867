"""How hard the property tests look. `RENTWATCH_FUZZ` scales every `max_examples`: the suite
runs a quarter of each count (it has to stay under a few minutes on two cores), and
`RENTWATCH_FUZZ=1` runs them all, as a deep pass before a release or after touching a reader
(`RENTWATCH_FUZZ=1 python -m pytest tests/test_fuzz.py tests/test_probe_readers.py`).
Hypothesis keeps every failure it finds in `.hypothesis/` and tries it first on the next run,
whatever the scale."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("RENTWATCH_FUZZ", "0.25"))


def examples(n: int) -> int:
    """`n` examples at full scale; never fewer than 30 (a property seen on a handful of
    inputs is not a property)."""
    return max(30, round(n * SCALE))
