"""The server's side of Vast's offer query: which rows a `{field: {op: value}}` JSON query
keeps (the client's side, reading the CLI's text, is `app/market/vast/query.py`)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any


def _driver_number(text: str) -> int | None:
    """`550.54.14` -> 550054014, the number the server compares a driver version as."""
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 3 for p in parts):
        return None
    return int("".join(p.zfill(3) for p in parts))


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "neq": operator.ne,
    "noteq": operator.ne,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}
EQUALITY = ("eq", "neq", "noteq")


def _coerce(a: Any, like: Any) -> Any:
    """Coerce a query value to the type of the offer's field (the CLI sends numbers as strings)."""
    if isinstance(like, bool):
        if isinstance(a, str):
            return a.strip().lower() in ("true", "1", "yes")
        return bool(a)
    if isinstance(like, int | float) and isinstance(a, str):
        try:
            return float(a)
        except ValueError:
            return a
    if isinstance(like, str) and isinstance(a, int | float) and not isinstance(a, bool):
        return str(a)
    return a


def _have(offer: dict[str, Any], field: str) -> Any:
    """The offer's value as the server compares it: a driver version as its number."""
    have = offer[field]
    if field == "driver_version" and isinstance(have, str):
        number = _driver_number(have)
        return have if number is None else number
    return have


def matches(offer: dict[str, Any], query: dict[str, Any]) -> bool:
    for field, cond in query.items():
        if not isinstance(cond, dict):
            continue  # top-level knobs such as order/type/limit
        if field not in offer:
            return False
        have = _have(offer, field)
        for op, want in cond.items():
            if op in ("in", "notin", "nin"):
                items = want if isinstance(want, list) else [want]
                try:
                    hit = any(_coerce(w, have) == have for w in items)
                except TypeError:
                    hit = False
                if hit != (op == "in"):
                    return False
                continue
            compare = _COMPARE.get(op)
            if compare is None:
                return False  # an operator the market does not know matches nothing
            try:  # a missing value is only ever equal or not
                ok = (op in EQUALITY or have is not None) and bool(
                    compare(have, _coerce(want, have))
                )
            except TypeError:
                ok = False
            if not ok:
                return False
    return True
