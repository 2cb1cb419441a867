"""The pending price increases of the account's rentals, on the routes the official CLI calls
(vastai 1.9.1 `api/price_increase.py`): `GET /api/v0/instances/pending-price-increases/`, and
`PUT /api/v0/instances/accept-price-increase/` / `reject-price-increase/` with a body of exactly
`{"pending_price_increase_id": <int>}` (the backend forbids any other key: 400). A row no longer
pending answers 404 `no_pending_price_increase`. The model is `sim/price_rises.py`."""

from __future__ import annotations

from aiohttp import web

from .answers import answer, body_json, error
from .market import SimMarket

NO_PENDING = "no_pending_price_increase"


class PriceRoutes:
    def __init__(self, market: SimMarket) -> None:
        self.market = market

    async def pending(self, request: web.Request) -> web.Response:
        rows = [
            p.row() for p in self.market.rises.pending_for(list(self.market.instances.values()))
        ]
        rows.sort(key=lambda r: r["pending_price_increase_id"])
        return answer(
            {
                "success": True,
                "count": len(rows),
                "truncated": False,
                "pending_price_increases": rows,
            }
        )

    async def accept(self, request: web.Request) -> web.Response:
        return await self._answer(request, True)

    async def reject(self, request: web.Request) -> web.Response:
        return await self._answer(request, False)

    async def _answer(self, request: web.Request, accept: bool) -> web.Response:
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
        row = self.market.rises.answer(pid, accept)
        if row is None:
            return error(404, NO_PENDING, f"no pending price increase {pid}")
        return answer(
            {"success": True, "pending_price_increase_id": pid, "contract_id": row.instance.id}
        )
