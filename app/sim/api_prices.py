"""The pending price increases of the account's rentals, on the routes the official CLI calls
(vastai 1.9.1 `api/price_increase.py`): the GET of pending rows, and accept / reject with a body
of exactly `{"pending_price_increase_id": <int>}` (any other key: 400; a row no longer pending:
404). `POST /sim/v0/price_rise` is the simulator's own, for tests (no key)."""

from __future__ import annotations

from aiohttp import web

from ..core.preflight.verdict import finite
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

    async def raise_price(self, request: web.Request) -> web.Response:
        try:
            body = await body_json(request)
        except ValueError:
            return error(400, "invalid_args", "the body is not JSON")
        body = body if isinstance(body, dict) else {}
        iid, factor, notice = (body.get(k) for k in ("instance_id", "factor", "notice_min"))
        inst = self.market.live(iid) if isinstance(iid, int) and not isinstance(iid, bool) else None
        if inst is None:
            return error(404, "no_such_instance", "no live instance with that id")
        factor, notice = finite(factor), finite(notice)
        if factor is None or notice is None or not 1 < factor <= 10 or not 1 <= notice <= 43200:
            return error(400, "invalid_args", "factor in (1, 10], notice_min in [1, 43200]")
        row = self.market.rises.raise_now(inst, self.market.clock.now(), factor, notice * 60)
        if row is None:
            return error(409, "no_rise", "its contract ends sooner, or a rise is already pending")
        return answer(row.row())

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
