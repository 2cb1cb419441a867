"""How hard the property tests look: each test's full count of examples runs under the
`deep` hypothesis profile (`python -m pytest --hypothesis-profile deep tests/test_fuzz.py
tests/test_probe_readers.py`), as a deep pass before a release or after touching a reader; the
suite runs a tenth of each count, at least 30, for it must stay under ten minutes on two cores.
Hypothesis keeps every failure it finds in `.hypothesis/` and tries it first on the next run,
whatever the profile."""

from __future__ import annotations

from hypothesis import settings

DEEP = "deep"  # registered in tests/conftest.py, where `--hypothesis-profile` can find it
SHARE = 0.1  # of each count, outside the deep profile


def examples(n: int) -> int:
    """`n` examples in the deep profile; never fewer than 30 (a property seen on a handful
    of inputs is not a property)."""
    if settings.get_current_profile_name() == DEEP:
        return n
    return max(30, round(n * SHARE))
