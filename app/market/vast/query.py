"""Vast's offer query language: the official CLI's text syntax (`num_gpus=1 rentable=true gpu_name
in [RTX_3090,RTX_4090] dph<0.5`), read into the API's JSON query `{field: {op: value}}`.

It follows the official CLI's parser (vastai `api/query.py` parse_query, `offers_alias`,
`offers_mult`), so a query copied from the CLI rents what the CLI would: its aliases, GB sent as
MB, days as seconds, `driver_version` as one number, `nin`/`noteq` spellings, and `field=any`
dropping the filter (tests/test_offer_query_cli.py runs both parsers). The simulator's side is
`app/sim/query_match.py`."""

from __future__ import annotations

import contextlib
import math
import re
from typing import Any

from ...core.errors import ConfigError

OPS = {
    ">=": "gte",
    ">": "gt",
    "gt": "gt",
    "gte": "gte",
    "<=": "lte",
    "<": "lt",
    "lt": "lt",
    "lte": "lte",
    "!=": "neq",
    "==": "eq",
    "=": "eq",
    "eq": "eq",
    "neq": "neq",
    "noteq": "neq",
    "not eq": "neq",
    "notin": "notin",
    "not in": "notin",
    "nin": "notin",
    "in": "in",
}
ALIASES = {
    "cuda_vers": "cuda_max_good",
    "display_active": "gpu_display_active",
    "dlperf_usd": "dlperf_per_dphtotal",
    "dph": "dph_total",
    "flops_usd": "flops_per_dphtotal",
}
MULTIPLIERS = {"cpu_ram": 1000.0, "gpu_ram": 1000.0, "gpu_total_ram": 1000.0, "duration": 86400.0}
WILDCARDS = frozenset({"?", "*", "any"})

_OP_TEXT = r"(?:\s*[=><!]+|\s+(?:gte|gt|lte|lt|noteq|not\s?eq|neq|eq|not\s?in|notin|nin|in)\s)"
_TERM = re.compile(
    r"\s*([a-zA-Z0-9_]+)(" + _OP_TEXT + r")\s*(\[[^\]]+\]|\"[^\"]+\"|'[^']+'|[^\s]+)"
)


def numeric_version(text: str) -> int | None:
    """`550.54.14` -> 550054014, as the CLI sends a driver version; None if not X.Y.Z."""
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 3 for p in parts):
        return None
    return int("".join(p.zfill(3) for p in parts))


def _value(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1].replace("_", " ")
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    with contextlib.suppress(ValueError):
        return int(text)
    try:
        out = float(text)
    except ValueError:
        return text.replace("_", " ")  # the CLI spells spaces in names as underscores
    return out if math.isfinite(out) else text


def _number(field: str, raw: str) -> float:
    try:
        out = float(raw)
    except ValueError:
        raise ConfigError(f"{field}: {raw!r} is not a number") from None
    if not math.isfinite(out):
        raise ConfigError(f"{field}: {raw!r} is not a finite number")
    return out


def parse_query(text: str, keep_wildcards: bool = False) -> dict[str, dict[str, Any]]:
    """Parse the CLI's query text into the API's JSON query; a bad term raises ConfigError. A
    `field=any` is dropped, as the CLI drops it; with `keep_wildcards` (a campaign's
    `offer_query`) it stays as `{}`, which keeps the client's default filter off that field."""
    out: dict[str, dict[str, Any]] = {}
    wild: set[str] = set()
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TERM.match(text, pos)
        if not m:
            raise ConfigError(f"cannot read offer query near {text[pos : pos + 30]!r}")
        field, op_text, raw = m.group(1), m.group(2), m.group(3)
        op = OPS.get(re.sub(r"\s+", " ", op_text.strip()))
        if op is None:
            raise ConfigError(f"unknown operator {op_text.strip()!r} near {text[pos : pos + 30]!r}")
        pos = m.end()
        field = ALIASES.get(field, field)
        if raw.lower() in WILDCARDS:
            if op != "eq":
                raise ConfigError(f"{field}: a wildcard only makes sense with '='")
            out.pop(field, None)  # `field=any`: no filter on it
            wild.add(field)
            continue
        cond = out.setdefault(field, {})
        if op in ("in", "notin"):
            items = [x.strip() for x in raw.strip("[]").split(",") if x.strip()]
            if not items:
                raise ConfigError(f"{field}: an empty list")
            if field in MULTIPLIERS:
                cond[op] = [_number(field, x) * MULTIPLIERS[field] for x in items]
            else:
                cond[op] = [_value(x) for x in items]
        elif field in MULTIPLIERS:
            cond[op] = _number(field, raw.strip("\"'")) * MULTIPLIERS[field]
        elif field == "driver_version" and "." in raw:
            version = numeric_version(raw.strip("\"'"))
            if version is None:
                raise ConfigError(f"driver_version: {raw!r} is not X.Y.Z")
            cond[op] = version
        else:
            cond[op] = _value(raw)
    if keep_wildcards:
        out.update({f: {} for f in wild})
    return out
