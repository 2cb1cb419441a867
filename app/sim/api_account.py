"""The account's side of the market beside its instances: who it is, its SSH keys, the GPU names
listed, the offer search, its rentals' pending price increases and its charges."""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web

from ..core.preflight.verdict import finite
from .answers import answer, body_json, call_now, error, ordered, page_of, public_key, query_of
from .market import SimMarket
from .query_match import matches
from .rental import SimInstance

NO_PENDING = "no_pending_price_increase"
DAY = 86400.0


async def current_user(market: SimMarket, request: web.Request) -> web.Response:
    keys = market.ssh_keys
    return answer(
        {
            "id": 4242,
            "username": "renter",
            "email": "renter@example.com",
            "balance": 100.0,
            "credit": 100.0,
            "has_billing": True,
            "ssh_key": keys[-1]["key"] if keys else None,
        }
    )


async def gpu_names(market: SimMarket, request: web.Request) -> web.Response:
    return answer({"gpu_names": sorted({m.advertised_gpu for m in market.machines})})


async def list_keys(market: SimMarket, request: web.Request) -> web.Response:
    return answer(market.ssh_keys)


async def add_key(market: SimMarket, request: web.Request) -> web.Response:
    key, keys = await public_key(request), market.ssh_keys
    if not any(k["key"] == key for k in keys):
        keys.append(
            {
                "id": len(keys) + 1,
                "key": key,
                "user_id": 4242,
                "created_at": call_now(market.clock),
            }
        )
    return answer({"success": True, "key": keys[-1]})


async def bundles(market: SimMarket, request: web.Request) -> web.Response:
    return search(market, await body_json(request), call_now(market.clock))


async def search_asks(market: SimMarket, request: web.Request) -> web.Response:
    """The CLI's `search offers --new`: the query under `q`."""
    return search(market, (await body_json(request) or {}).get("q", {}), call_now(market.clock))


def search(market: SimMarket, q: Any, now: float) -> web.Response:
    """The offers `q` matches (the CLI's query language). `type` picks the tier (openapi.yaml:
    `ondemand`, `bid`, `reserved`): a bid search prices each offer at its `min_bid`, and leaves
    out a machine a rival holds on-demand."""
    if not isinstance(q, dict):
        return error(400, "invalid_args", "query must be an object")
    order = q.get("order") or [["score", "desc"]]
    limit = q.get("limit")
    storage = float(q.get("allocated_storage") or 5.0)
    bid = str(q.get("type") or "").lower() in ("bid", "interruptible")
    offers = []
    for m in market.offers(now):
        quote = market.bid_quote(m, now)
        if bid and quote is None:  # held on-demand by a rival: no bid wins
            continue
        listed = round(m.dph_base, 6) if quote is None else quote
        o = m.offer_json(storage, now, listed, market.offer_id(m, now))
        if bid:
            o["dph_total"] = round(o["min_bid"] + o["storage_total_cost"], 6)
        offers.append(o)
    filters = {k: v for k, v in q.items() if isinstance(v, dict) and k != "type"}
    offers = [o for o in offers if matches(o, filters)]
    offers = ordered(offers, [o for o in order if isinstance(o, list | tuple) and len(o) == 2])
    if limit is not None:
        offers = offers[: max(0, int(limit))]
    return answer({"offers": offers})


async def pending_rises(market: SimMarket, request: web.Request) -> web.Response:
    rows = [p.row() for p in market.rises.pending_for(list(market.instances.values()))]
    rows.sort(key=lambda r: r["pending_price_increase_id"])
    return answer(
        {
            "success": True,
            "count": len(rows),
            "truncated": False,
            "pending_price_increases": rows,
        }
    )


async def raise_price(market: SimMarket, request: web.Request) -> web.Response:
    """`POST /sim/v0/price_rise`: the simulator's own, for tests (no key)."""
    try:
        body = await body_json(request)
    except ValueError:
        return error(400, "invalid_args", "the body is not JSON")
    body = body if isinstance(body, dict) else {}
    iid, factor, notice = (body.get(k) for k in ("instance_id", "factor", "notice_min"))
    inst = market.live(iid) if isinstance(iid, int) and not isinstance(iid, bool) else None
    if inst is None:
        return error(404, "no_such_instance", "no live instance with that id")
    factor, notice = finite(factor), finite(notice)
    if factor is None or notice is None or not 1 < factor <= 10 or not 1 <= notice <= 43200:
        return error(400, "invalid_args", "factor in (1, 10], notice_min in [1, 43200]")
    row = market.rises.raise_now(inst, call_now(market.clock), factor, notice * 60)
    if row is None:
        return error(409, "no_rise", "its contract ends sooner, or a rise is already pending")
    return answer(row.row())


async def answer_rise(market: SimMarket, request: web.Request) -> web.Response:
    """Accept or reject with a body of exactly `{"pending_price_increase_id": <int>}`, as the
    official CLI sends it (vastai 1.9.1 `api/price_increase.py`): any other body is a 400."""
    body = await body_json(request)
    pid = body.get("pending_price_increase_id") if isinstance(body, dict) else None
    if type(pid) is not int or set(body) != {"pending_price_increase_id"}:
        return error(400, "invalid_args", "expected exactly {pending_price_increase_id: int}")
    row = market.rises.answer(pid, request.match_info["answer"] == "accept")
    if row is None:
        return error(404, NO_PENDING, f"no pending price increase {pid}")
    return answer(
        {"success": True, "pending_price_increase_id": pid, "contract_id": row.instance.id}
    )


async def list_charges(market: SimMarket, request: web.Request) -> web.Response:
    """`GET /api/v0/charges/` (openapi.yaml showCharges; vastai 1.9.1 `api/billing.py`): one row
    per contract over whole UTC days of `select_filters.day`, items `gpu`, `disk`, `bwd`, `bwu`,
    amounts to three decimals, pages of at most 100."""
    query = query_of(request)
    filters = json.loads(query.get("select_filters") or "{}")
    if not isinstance(filters, dict):
        return error(400, "invalid_args", "select_filters must be an object")
    now = call_now(market.clock)
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
    every = market.instances.values() if not types or "instance" in types else ()
    rows = [r for i in every if (r := contract_row(i, market.scenario.gpu_billing, lo, hi))]
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
    label = {"label": inst.label} if inst.label is not None else {}
    row = _item("instance", total, t0, t1, f"Instance {inst.id} Charges - {span}")
    return row | {"source": f"instance-{inst.id}", "metadata": label, "items": items}
