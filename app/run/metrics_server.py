"""`--metrics HOST:PORT`: `GET /metrics` served through the controller's guarded listener, on a
thread and loop of its own so a scrape and a poll never wait on each other.

Not prometheus-client's own server: a thread per connection with no cap and no timeout, whose
idle connections took the descriptors SSH needed (proven hosts given up as `ssh_dead`). Here at
most `cap` connections are open, and one idle for `idle_s` is dropped."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from ..notify.metrics import Metrics
from .service.listener import Listener, default_cap, quiet_http_errors

IDLE_S = 5.0  # wall seconds a connection may wait to ask, or sit idle between scrapes
CAP_SHARE = 16  # at most a sixteenth of the descriptor limit goes to metrics connections
CAP_MIN, CAP_MAX = 2, 16  # a Prometheus server scrapes over one connection


class MetricsServer:
    def __init__(self, metrics: Metrics, host: str, port: int = 0) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # bound here, in the caller's thread: a port in use is the caller's error, at once
        self._sock = socket.create_server((host, port), family=family, backlog=128)
        self.host, self.port = self._sock.getsockname()[:2]
        self.cap = default_cap(CAP_SHARE, CAP_MIN, CAP_MAX)
        self._metrics = metrics
        self._loop = asyncio.new_event_loop()
        self.listener: Listener | None = None
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._run, name="rentwatch-metrics", daemon=True)
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        except BaseException:
            self.close()
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._stop())
            self._loop.close()

    async def _start(self) -> None:
        app = web.Application(middlewares=[self._count_valid])
        app.router.add_get("/metrics", make_aiohttp_handler(self._metrics.registry))
        # keep-alive connections idle this long are closed by aiohttp itself
        self._runner = web.AppRunner(app, access_log=None, keepalive_timeout=IDLE_S)
        await self._runner.setup()
        quiet_http_errors(time.monotonic)
        assert self._runner.server is not None
        self.listener = Listener(
            self._sock, self._runner.server, cap=self.cap, first_request_s=IDLE_S
        )
        self.listener.start()

    @web.middleware
    async def _count_valid(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        response = await handler(request)
        if self.listener is not None and request.path == "/metrics" and response.status == 200:
            self.listener.valid(request.transport)
        return response

    async def _stop(self) -> None:
        if self.listener is not None:
            await self.listener.close()
        else:
            self._sock.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop stopped already
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
