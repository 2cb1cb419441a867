"""Dataclasses read back from JSON: the keys a class has fields for, the rest (a newer side's)
left out."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def record(cls: type[T], data: Mapping[str, Any], **fixed: Any) -> T:
    """`cls` from the keys of `data` it has fields for; `fixed` replaces what it names."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{**{k: v for k, v in data.items() if k in names}, **fixed})
