"""The account's side of the market beside its instances: who it is (`/users/current/`), its SSH
keys, the GPU names the market lists, the offer search, and its rentals' pending price increases.
Its charges: `charges.py`. Each handler takes the market and the call.

The offer search, `POST /api/v0/bundles/` (and the CLI's `--new` `PUT /api/v0/search/asks/`), is
matched by the CLI's query language (`query_match.py`). `type` picks the tier (vast-ai/docs
`openapi.yaml`: `ondemand`, `bid`, `reserved`; the CLI sends `on-demand`). Under `type: "bid"` an
offer is priced at its `min_bid` ("Uses minimum bid price") and a machine held on-demand is not
listed. `[churn]` decides what is listed now.

The pending price increases are on the routes the official CLI calls (vastai 1.9.1
`api/price_increase.py`): the GET of pending rows, and accept / reject with a body of exactly
`{"pending_price_increase_id": <int>}` (any other key: 400; a row no longer pending: 404).
`POST /sim/v0/price_rise` is the simulator's own, for tests (no key)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..core.preflight.verdict import finite
from .answers import answer, body_json, error, sort_key
from .market import SimMarket
from .query_match import matches

NO_PENDING = "no_pending_price_increase"


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
    key = str((await body_json(request)).get("ssh_key", "")).strip()
    if not key.startswith(("ssh-", "ecdsa-")):
        return error(400, "invalid_args", "not an OpenSSH public key")
    keys = market.ssh_keys
    if not any(k["key"] == key for k in keys):
        keys.append(
            {
                "id": len(keys) + 1,
                "key": key,
                "user_id": 4242,
                "created_at": market.clock.now(),
            }
        )
    return answer({"success": True, "key": keys[-1]})


async def bundles(market: SimMarket, request: web.Request) -> web.Response:
    return search(market, await body_json(request))


async def search_asks(market: SimMarket, request: web.Request) -> web.Response:
    return search(market, (await body_json(request) or {}).get("q", {}))


def search(market: SimMarket, q: Any) -> web.Response:
    if not isinstance(q, dict):
        return error(400, "invalid_args", "query must be an object")
    order = q.get("order") or [["score", "desc"]]
    limit = q.get("limit")
    storage = float(q.get("allocated_storage") or 5.0)
    now = market.clock.now()
    bid = str(q.get("type") or "").lower() in ("bid", "interruptible")
    offers = []
    for m in market.offers():
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
    for col, direction in reversed(
        [tuple(o) for o in order if isinstance(o, list | tuple) and len(o) == 2]
    ):
        offers.sort(key=sort_key(col), reverse=str(direction).lower() == "desc")
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
    row = market.rises.raise_now(inst, market.clock.now(), factor, notice * 60)
    if row is None:
        return error(409, "no_rise", "its contract ends sooner, or a rise is already pending")
    return answer(row.row())


async def accept_rise(market: SimMarket, request: web.Request) -> web.Response:
    return await _answer_rise(market, request, True)


async def reject_rise(market: SimMarket, request: web.Request) -> web.Response:
    return await _answer_rise(market, request, False)


async def _answer_rise(market: SimMarket, request: web.Request, accept: bool) -> web.Response:
    try:
        body = await body_json(request)
    except ValueError:
        return error(400, "invalid_args", "the body is not JSON")
    pid = body.get("pending_price_increase_id") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or set(body) != {"pending_price_increase_id"}
        or isinstance(pid, bool)
        or not isinstance(pid, int)
    ):
        return error(400, "invalid_args", "expected exactly {pending_price_increase_id: int}")
    row = market.rises.answer(pid, accept)
    if row is None:
        return error(404, NO_PENDING, f"no pending price increase {pid}")
    return answer(
        {"success": True, "pending_price_increase_id": pid, "contract_id": row.instance.id}
    )
