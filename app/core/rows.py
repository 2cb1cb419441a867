"""What a market's instance row can be believed for (non-finite or negative numbers: unread), and
how rentwatch's own rows are known (their label, `rw:<campaign>:<tag>`)."""

from __future__ import annotations

import math

from .models import Instance

LABEL_PREFIX = "rw"


def row_problem(inst: Instance) -> str | None:
    """Why a market row cannot be believed (None: it can)."""
    prices = ("gpu_dph", "dph_total", "storage_total_cost")
    numbers = {name: getattr(inst, name) for name in (*prices, "gpu_util", "start_date")}
    for name, value in numbers.items():
        if value is not None and not math.isfinite(value):
            return f"{name} is not a finite number ({value!r})"
    return next(
        (f"{p} is negative ({numbers[p]!r})" for p in prices if (numbers[p] or 0) < 0), None
    )


def finite(value: float | None, default: float) -> float:
    """A market number if it is one (finite, not negative), else `default`."""
    if value is None or not math.isfinite(value) or value < 0:
        return default
    return value


def campaign_label(campaign: str) -> str:
    """The label prefix of a campaign's instances (each create adds a unique tag to it)."""
    return f"{LABEL_PREFIX}:{campaign}"
