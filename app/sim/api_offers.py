"""The offer search: `POST /api/v0/bundles/` (and the CLI's `--new` `PUT /api/v0/search/asks/`),
matched by the CLI's query language (`query_match.py`).

`type` picks the tier (vast-ai/docs `openapi.yaml`: `ondemand`, `bid`, `reserved`; the CLI sends
`on-demand`). Under `type: "bid"` an offer is priced at its `min_bid` ("Uses minimum bid price")
and a machine held on-demand is not listed. `[churn]` decides what is listed now."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .answers import answer, body_json, error, sort_key
from .market import SimMarket
from .query_match import matches


class OfferRoutes:
    def __init__(self, market: SimMarket) -> None:
        self.market = market

    async def bundles(self, request: web.Request) -> web.Response:
        return self.search(await body_json(request))

    async def search_asks(self, request: web.Request) -> web.Response:
        return self.search((await body_json(request) or {}).get("q", {}))

    def search(self, q: Any) -> web.Response:
        if not isinstance(q, dict):
            return error(400, "invalid_args", "query must be an object")
        order = q.get("order") or [["score", "desc"]]
        limit = q.get("limit")
        storage = float(q.get("allocated_storage") or 5.0)
        now = self.market.clock.now()
        bid = str(q.get("type") or "").lower() in ("bid", "interruptible")
        offers = []
        for m in self.market.offers():
            quote = self.market.bid_quote(m, now)
            if bid and quote is None:  # held on-demand by a rival: no bid wins
                continue
            listed = round(m.dph_base, 6) if quote is None else quote
            o = m.offer_json(storage, now, listed, self.market.offer_id(m, now))
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
