"""The market's own charges, `GET /api/v0/charges/`, as Vast gives them (vast-ai/docs `openapi.yaml`
showCharges; vastai 1.9.1 `api/billing.py` show_invoices_v1).

One row per contract over the queried range (`select_filters.day` `gte`/`lte` as whole UTC days;
both required, else 400), items `gpu`, `disk`, `bwd`, `bwu`, amounts to three decimals; pages of
`limit` (at most 100) follow `next_token` through `after_token`."""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web

from ..core.preflight.verdict import finite
from .answers import answer, error, page_of, query_of
from .market import SimMarket
from .rental import SimInstance

DAY = 86400.0


async def list_charges(market: SimMarket, request: web.Request) -> web.Response:
    query = query_of(request)
    filters = json.loads(query.get("select_filters") or "{}")
    if not isinstance(filters, dict):
        return error(400, "invalid_args", "select_filters must be an object")
    now = market.clock.now()
    day = filters.get("day")
    gte, lte = _bound(day, "gte"), _bound(day, "lte")
    if gte is None or lte is None:
        # the real endpoint refuses a query without its day range (openapi.yaml); the CLI
        # always sends one (vastai `api/billing.py`: the last 7 days)
        return error(400, "invalid_args", "select_filters.day needs gte and lte (unix seconds)")
    # the filter is on `day`: whole UTC days, from the one `gte` falls in to the end of
    # the one `lte` falls in
    lo = gte // DAY * DAY
    hi = min((lte // DAY + 1) * DAY, now)
    kinds = filters.get("type")
    types = kinds.get("in") if isinstance(kinds, dict) else None
    limit = max(1, min(int(query.get("limit") or 100), 100))
    rows: list[dict[str, Any]] = []
    if not types or "instance" in types:
        mode = market.scenario.gpu_billing
        for inst in sorted(market.instances.values(), key=lambda i: i.id):
            row = contract_row(inst, mode, lo, hi)
            if row is not None:
                rows.append(row)
    rows.sort(key=lambda r: (r["start"], r["source"]))
    if str(query.get("latest_first", "true")).lower() != "false":
        rows.reverse()
    page, next_token = page_of(rows, query.get("after_token"), limit)
    return answer(
        {
            "success": True,
            "results": page,
            "count": len(page),
            "total": len(rows),
            "next_token": next_token,
        }
    )


def _bound(day: Any, key: str) -> float | None:
    """One end of the `day` range: a finite number of unix seconds, else None."""
    return finite(day.get(key)) if isinstance(day, dict) else None


def _item(kind: str, usd: float, t0: float, t1: float, description: str) -> dict[str, Any]:
    return {
        "start": t0,
        "end": t1,
        "type": kind,
        "source": None,
        "description": description,
        "amount": round(usd, 3),
        "metadata": {},
        "items": [],
    }


def contract_row(inst: SimInstance, mode: str, lo: float, hi: float) -> dict[str, Any] | None:
    """One contract's charges between `lo` and `hi` (None: it owes nothing there)."""
    t0 = max(lo, inst.created_at)
    t1 = min(hi, inst.destroyed_at if inst.destroyed_at is not None else hi)
    if t1 <= t0:
        return None
    a, b = inst.charges(t0, mode), inst.charges(t1, mode)
    gpu, disk = b.gpu_usd - a.gpu_usd, b.storage_usd - a.storage_usd
    moved = [(into, out) for at, into, out in inst.transfers if t0 < at <= t1]
    bwd, bwu = sum(i for i, _ in moved), sum(o for _, o in moved)
    gpu_h = gpu / inst.gpu_dph if inst.gpu_dph > 0 else 0.0
    disk_h = disk / inst.storage_dph if inst.storage_dph > 0 else 0.0
    said = {
        "gpu": (gpu, f"{gpu_h:.3f} hours at ${inst.gpu_dph:.3f}/hour"),
        "disk": (disk, f"{inst.disk_gb:.0f} GB of disk for {disk_h:.3f} hours"),
        "bwd": (bwd, "bandwidth into the instance"),
        "bwu": (bwu, "bandwidth out of the instance"),
    }
    items = [_item(kind, usd, t0, t1, text) for kind, (usd, text) in said.items() if usd > 0]
    total = gpu + disk + bwd + bwu
    if round(total, 3) <= 0:
        return None
    days = max(1, math.ceil((t1 - t0) / DAY))
    span = f"{days} day{'s' if days > 1 else ''}"
    row = _item("instance", total, t0, t1, f"Instance {inst.id} Charges - {span}")
    row["source"] = f"instance-{inst.id}"
    row["metadata"] = {"label": inst.label} if inst.label is not None else {}
    row["items"] = items
    return row
