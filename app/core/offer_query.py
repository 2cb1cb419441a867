"""The offer query language: the official CLI's text syntax, and matching offers against a query.

Text form (as `vastai search offers` takes it): space-separated `field op value` terms, e.g.
`num_gpus=1 rentable=true gpu_name in [RTX_3090,RTX_4090] dph_total<0.5`. The JSON form the
API receives is `{field: {op: value}}` with ops eq neq gt gte lt lte in notin.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

from .errors import ConfigError

_OPS = {
    "=": "eq",
    "==": "eq",
    "!=": "neq",
    ">": "gt",
    ">=": "gte",
    "<": "lt",
    "<=": "lte",
    "in": "in",
    "notin": "notin",
    "eq": "eq",
    "neq": "neq",
    "gt": "gt",
    "gte": "gte",
    "lt": "lt",
    "lte": "lte",
}
_TERM = re.compile(
    r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(>=|<=|==|!=|=|>|<|\bnotin\b|\bin\b|\beq\b|\bneq\b|\bgte\b|\bgt\b|\blte\b|\blt\b)\s*"
    r"(\[[^\]]*\]|\"[^\"]*\"|'[^']*'|[^\s]+)"
)


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "neq": operator.ne,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
}


def _value(text: str) -> Any:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        return [_value(part) for part in text[1:-1].split(",") if part.strip()]
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text.replace("_", " ")  # the CLI spells spaces in names as underscores


def parse_query(text: str) -> dict[str, dict[str, Any]]:
    """Parse the CLI's query text into the API's JSON query; a bad term raises ConfigError."""
    out: dict[str, dict[str, Any]] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TERM.match(text, pos)
        if not m:
            raise ConfigError(f"cannot read offer query near {text[pos : pos + 30]!r}")
        field, op, raw = m.group(1), _OPS[m.group(2)], m.group(3)
        out.setdefault(field, {})[op] = _value(raw)
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


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
    return a


def matches(offer: dict[str, Any], query: dict[str, Any]) -> bool:
    """True when an offer satisfies every `{field: {op: value}}` term; unknown fields never match."""
    for field, cond in query.items():
        if not isinstance(cond, dict):
            continue  # top-level knobs such as order/type/limit
        if field not in offer:
            return False
        have = offer[field]
        for op, want in cond.items():
            if op in ("in", "notin"):
                items = want if isinstance(want, list) else [want]
                hit = any(_coerce(w, have) == have for w in items)
                if hit != (op == "in"):
                    return False
                continue
            want = _coerce(want, have)
            compare = _COMPARE.get(op)
            if compare is None:
                raise ConfigError(f"unknown query operator {op!r} on {field!r}")
            try:
                ok = (
                    have is not None and bool(compare(have, want))
                    if op not in ("eq", "neq")
                    else bool(compare(have, want))
                )
            except TypeError:
                ok = False
            if not ok:
                return False
    return True
