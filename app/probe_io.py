"""Shipping probes to hosts and reading what comes back, defensively."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from .core.errors import RentwatchError

MAX_PROBE_OUTPUT = 256 * 1024


class ProbeError(RentwatchError):
    """A probe's output could not be trusted: garbage, too big, not JSON, wrong schema, a hang."""

    title = "probe failed"


def probe_source(name: str) -> bytes:
    return resources.files("rentwatch.probes").joinpath(f"{name}.py").read_bytes()


def parse_probe_output(raw: bytes, probe: str, truncated: bool = False) -> dict[str, Any]:
    """The probe's JSON document (its last non-empty line), validated; ProbeError otherwise."""
    if truncated or len(raw) > MAX_PROBE_OUTPUT:
        raise ProbeError(f"{probe} printed more than {MAX_PROBE_OUTPUT // 1024} KiB: cut off")
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        raise ProbeError(f"{probe} printed nothing")
    last = text.splitlines()[-1]
    try:
        doc = json.loads(last)
    except json.JSONDecodeError:
        shown = "".join(ch if ch.isprintable() else "?" for ch in last[:80])
        raise ProbeError(f"{probe} did not print JSON: {shown!r}") from None
    if not isinstance(doc, dict) or doc.get("probe") != probe or doc.get("schema") != 1:
        raise ProbeError(f"{probe} printed JSON of the wrong shape")
    return doc
