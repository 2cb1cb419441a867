"""A proxy in front of the simulator that answers every marketplace call the way Vast answers
a revoked key once `revoke()` is called: 404 `{"error": "auth_error", "msg": "Invalid user
key"}` (the search endpoint's documented answer, vast-ai/docs openapi.yaml; most other calls
answer 401 with the same body). The simulator's own `/sim/` calls pass through."""

from __future__ import annotations

import asyncio
import threading

import httpx
from aiohttp import web

REVOKED = {"success": False, "error": "auth_error", "msg": "Invalid user key"}


class RevokingProxy:
    def __init__(self, upstream: str, status: int = 404) -> None:
        self.upstream = upstream.rstrip("/")
        self.status = status
        self.revoked = threading.Event()
        self.refused: list[str] = []  # "METHOD path" of each call answered as revoked
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def revoke(self) -> None:
        self.revoked.set()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if self.revoked.is_set() and not request.path.startswith("/sim/"):
            self.refused.append(f"{request.method} {request.path}")
            return web.json_response(REVOKED, status=self.status)
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.request(
                request.method,
                self.upstream + request.path_qs,
                content=await request.read(),
                headers={k: v for k, v in request.headers.items() if k.lower() != "host"},
            )
        headers = {
            k: v
            for k, v in r.headers.items()
            if k.lower() not in ("content-length", "transfer-encoding", "content-encoding")
        }
        return web.Response(status=r.status_code, body=r.content, headers=headers)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._runner = runner
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> RevokingProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        async def down() -> None:
            await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(down(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
