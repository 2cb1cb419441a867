"""The marketplace's REST surface (VAST_API.md's subset) on aiohttp: one route table and one
middleware for what every call shares: the key, `[faults]`, pacing and `X-Market-Time`."""

from __future__ import annotations

import asyncio
import functools
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from . import api_account as acct
from . import api_instances as acts
from .answers import MARKET_NOW, MAX_BODY, SCOPED, Refused, answer, error, text
from .market import SimMarket

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Route = Callable[[SimMarket, web.Request], Awaitable[web.StreamResponse]]
S = "{slash:/?}"  # the market answers a path with or without its trailing slash
ID = r"{iid:\d+}"
ANSWER = "{answer:accept|reject}"
# Minimum market seconds between two calls of a kind by one key: the thresholds of the 429
# examples in Vast's OpenAPI file (vast-ai/docs `api-reference/openapi.yaml`: show instance 2.0,
# list 1.0, manage 1.0, create 4.5, destroy 3.0, charges 1.0), with no burst (the docs: "enforced
# as a minimum interval between requests"). The client's DEFAULT_MIN_INTERVALS is this table.
# The offer search has no documented threshold and is not paced.
PACING = {"show": 2.0, "list": 1.0, "manage": 1.0, "create": 4.5, "destroy": 3.0, "charges": 1.0}
# change bid (`PUT /api/v0/instances/bid_price/{id}/`): 5.5 in the same file; copy between
# instances (`PUT /api/v0/commands/copy_direct/`): 3.5 (`copy.yaml` x-rateLimit); the client
# paces them as the same kinds (market/vast/transport.BID_MIN_INTERVAL, COPY_MIN_INTERVAL)
CALL_PACING = {"bid": 5.5, "copy": 3.5}

RATE_LIMIT_BODIES = (
    lambda: text("API requests too frequent", 429),
    lambda: answer({"detail": "Request was throttled."}, 429),
    lambda: error(429, "rate_limit_exceeded", "slow down"),
)


class MarketAPI:
    def __init__(self, market: SimMarket) -> None:
        self.market = market
        self.logs = acts.Logs()
        self.fault_rng = random.Random(market.scenario.seed * 7919 + 17)
        self.redirect_rng = random.Random(market.scenario.seed * 7919 + 29)
        self.faults_injected: Counter[str] = Counter()
        self.paced = market.scenario.pacing  # enforce PACING (the scenario may turn it off)
        self._last: dict[tuple[str, str], float] = {}  # (key, kind) -> last call answered

    def on(self, route: Route, pace_kind: str | None = None, **tags: bool) -> Handler:
        """`route` on this market, with what the middleware reads of it: `pace_kind`, the `PACING`
        interval its calls count against; `public`, the simulator's own (no key, no faults, no
        pacing); `own_instance`, one an instance-scoped key (the container's CONTAINER_API_KEY)
        may call on its own instance (every other route refuses that key)."""
        run = functools.partial(route, self.market)
        run.__dict__.update(tags, pace_kind=pace_kind)
        return run

    def routes(self) -> list[web.AbstractRouteDef]:
        on = self.on
        return [
            web.get("/sim/v0/truth", on(truth, public=True)),
            web.get("/sim/v0/clock", on(clock, public=True)),
            web.post("/sim/v0/price_rise", on(acct.raise_price, public=True)),
            web.get("/sim/v0/logs/{token:[0-9a-f]+}", on(self.logs.result, public=True)),
            web.post(f"/api/v0/bundles{S}", on(acct.bundles)),
            web.put("/api/v0/search/asks/", on(acct.search_asks)),
            web.get(f"/api/v1/instances{S}", on(acts.list_page, "list")),
            web.get(f"/api/v0/instances{S}", on(acts.list_v0)),
            web.get("/api/v0/instances/filters/", on(acts.filters)),
            web.get(f"/api/v0/instances/{ID}{S}", on(acts.show, "show", own_instance=True)),
            web.put(f"/api/v0/instances/{ID}{S}", on(acts.manage, "manage", own_instance=True)),
            web.delete(f"/api/v0/instances/{ID}{S}", on(acts.delete, "destroy", own_instance=True)),
            web.put(f"/api/v0/instances/request_logs/{ID}{S}", on(self.logs.ask)),
            web.put(f"/api/v0/instances/bid_price/{ID}{S}", on(acts.bid_price, "bid")),
            web.get(f"/api/v0/instances/pending-price-increases{S}", on(acct.pending_rises)),
            web.put(f"/api/v0/instances/{ANSWER}-price-increase{S}", on(acct.answer_rise)),
            web.put(f"/api/v0/commands/copy_direct{S}", on(acts.copy_direct, "copy")),
            web.delete(f"/api/v0/commands/copy_direct{S}", on(acts.cancel_copy, "copy")),
            web.post(f"/api/v0/instances/{ID}/ssh{S}", on(acts.attach_key)),
            web.get(f"/api/v0/instances/{ID}/ssh{S}", on(acts.instance_keys)),
            web.put(r"/api/v0/asks/{ask:\d+}" + S, on(acts.rent, "create")),
            web.get(f"/api/v0/charges{S}", on(acct.list_charges, "charges")),
            web.get(f"/api/v0/gpu_names/unique{S}", on(acct.gpu_names)),
            web.get(f"/api/v0/users/current{S}", on(acct.current_user)),
            web.get(f"/api/v0/ssh{S}", on(acct.list_keys)),
            web.post(f"/api/v0/ssh{S}", on(acct.add_key)),
        ]

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._every_call], client_max_size=MAX_BODY)
        app.add_routes(self.routes())
        return app

    @web.middleware
    async def _every_call(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        now = self.market.clock.now()
        MARKET_NOW.set(now)  # every answer is as of the moment stamped on it
        route = request.match_info.handler if request.match_info.http_exception is None else None
        if getattr(route, "public", False):
            resp = await handler(request)
        else:
            resp = await self._private(request, handler, route, now)
        resp.headers["X-Market-Time"] = f"{now:.3f}"
        return resp

    async def _private(
        self, request: web.Request, handler: Handler, route: Any, now: float
    ) -> web.StreamResponse:
        if self._redirect(request):
            # the call moved (a 307 keeps the method and body): a client that follows it
            # must send its key again, as the CLI's session does for the same service
            where = request.rel_url.update_query({"moved": "1"})
            return web.Response(status=307, headers={"Location": str(where)})
        key = self._key(request)
        scoped = self.market.instance_for_key(key) if key else None
        if key != self.market.api_key and scoped is None:
            return error(401, "auth_error", "Invalid user key")
        fault = self._fault() or self._pace(key or "", getattr(route, "pace_kind", None))
        if fault is not None:
            return fault
        self.market.market_stops(now)
        if scoped is not None and not (
            getattr(route, "own_instance", False) and int(request.match_info["iid"]) == scoped
        ):
            return error(403, "forbidden", "this key is scoped to one instance")
        if scoped is not None:
            request[SCOPED] = scoped
        try:
            resp = await handler(request)
        except Refused as refused:
            resp = refused.response
        except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
            resp = error(404, "not_found", f"no route for {request.method} {request.path}")
        except (ValueError, TypeError, KeyError) as exc:
            resp = error(400, "invalid_args", f"bad request: {exc}")
        return await self._post_fault(resp)

    def _redirect(self, request: web.Request) -> bool:
        rate = self.market.scenario.faults.rate_redirect
        if rate <= 0 or "moved" in request.query or self.redirect_rng.random() >= rate:
            return False
        self.faults_injected["redirect"] += 1
        return True

    @staticmethod
    def _key(request: web.Request) -> str | None:
        auth = request.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return request.query.get("api_key")

    def _fault(self) -> web.Response | None:
        f = self.market.scenario.faults
        r = self.fault_rng.random()
        if r < f.rate_429:
            self.faults_injected["429"] += 1
            return RATE_LIMIT_BODIES[self.fault_rng.randrange(len(RATE_LIMIT_BODIES))]()
        if r < f.rate_429 + f.rate_5xx:
            self.faults_injected["5xx"] += 1
            return error(self.fault_rng.choice([500, 502, 503]), "server_error", "upstream error")
        return None

    def _pace(self, key: str, kind: str | None) -> web.Response | None:
        """At most one call of a kind per interval and key, in market time (through a stand too:
        `SimClock.pacing_now`), from the last call let through (the docs do not say a refused
        call moves it); past it, the OpenAPI's 429 body."""
        if not self.paced or kind is None:
            return None
        now = self.market.clock.pacing_now()
        interval = PACING.get(kind) or CALL_PACING[kind]
        last = self._last.get((key, kind))
        if last is not None and now - last < interval:
            return answer(
                {"detail": f"API requests too frequent endpoint threshold={interval}"}, 429
            )
        self._last[(key, kind)] = now
        return None

    async def _post_fault(self, resp: web.StreamResponse) -> web.StreamResponse:
        """Faults that hit after the action happened: a stall past the timeout, a garbled body."""
        f = self.market.scenario.faults
        r = self.fault_rng.random()
        if r < f.rate_timeout:
            self.faults_injected["timeout"] += 1
            await asyncio.sleep(f.timeout_s)
        elif r < f.rate_timeout + f.rate_malformed and isinstance(resp, web.Response):
            self.faults_injected["malformed"] += 1
            body = resp.body if isinstance(resp.body, bytes) else b""
            resp.body = body[: max(1, len(body) // 2)] + b'{"'
        return resp


async def truth(market: SimMarket, request: web.Request) -> web.Response:
    return answer(market.truth())


async def clock(market: SimMarket, request: web.Request) -> web.Response:
    return answer(
        {
            "now": market.clock.now(),
            "time_scale": market.clock.time_scale,
            "gpu_billing": market.scenario.gpu_billing,
        }
    )
