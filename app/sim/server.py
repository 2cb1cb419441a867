"""Runs the simulated marketplace: HTTP API, SSH hosts and the market clock's ticker."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web

from . import served
from .api import MarketAPI
from .clock import SimClock
from .market import SimMarket
from .scenario import Scenario
from .ssh_hosts import SSHHosts
from .webhooks_out import WebhookSender


class SimServer:
    """One simulated marketplace on loopback. Use `start()`/`stop()` inside a running loop, or
    `start_in_thread()` to run it beside synchronous code (tests, the demo)."""

    def __init__(
        self,
        scenario: Scenario,
        port: int = 0,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        clock: SimClock | None = None,
        id_base: int | None = None,
    ) -> None:
        self.scenario = scenario
        self.market = SimMarket(scenario, clock, api_key=api_key, id_base=id_base)
        self.host = host
        self.port = port
        self.api = MarketAPI(self.market)
        self.ssh: SSHHosts | None = None
        self.webhooks: WebhookSender | None = None
        self._runner: web.AppRunner | None = None
        self._ticker: asyncio.Task[Any] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # the clock is stepped (app/referee/stepped.py): whoever steps it syncs the hosts at
        # each step (`SSHHosts.settle`), and the ticker leaves them alone
        self.stepped = self.market.clock.is_stepped

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_key(self) -> str:
        return self.market.api_key

    async def start(self) -> None:
        # no access log; a stalled answer (a fault) must not hold the market's shutdown
        self._runner = web.AppRunner(self.api.app(), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        served.add(self.url)
        self.ssh = SSHHosts(self.market, self.url)
        if self.scenario.webhook_url:
            self.webhooks = WebhookSender(
                self.market, self.scenario.webhook_url, self.scenario.webhook_secret
            )
        self._ticker = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        assert self.ssh is not None
        while True:
            try:
                if not self.stepped:
                    await self.ssh.sync()
                if self.webhooks is not None:
                    self.webhooks.tick()
            except Exception as exc:  # keep the market alive; a broken host must not end it
                print(f"sim: ssh sync failed: {exc!r}", flush=True)
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        served.discard(self.url)
        if self._ticker:
            self._ticker.cancel()
        if self._runner:
            await self._runner.cleanup()
        if self.ssh:
            await self.ssh.close_all()
        if self.webhooks is not None:
            await self.webhooks.close()

    def start_in_thread(self) -> SimServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:
                errors.append(exc)
                return
            finally:
                ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.stop())
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for t in pending:  # SSH sessions and their subprocesses still running
                    t.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.close()

        self._thread = threading.Thread(target=main, name="rentwatch-sim", daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            raise errors[0]
        return self

    def call(self, fn: Any, *args: Any) -> Any:
        assert self._loop is not None
        fut: Any = asyncio.run_coroutine_threadsafe(_as_coro(fn, *args), self._loop)
        return fut.result(30)

    def stop_thread(self) -> None:
        """Stop the market and every process its hosts started; a second call is a no-op."""
        if self._loop is not None and self._thread is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)


async def _as_coro(fn: Any, *args: Any) -> Any:
    out = fn(*args)
    if asyncio.iscoroutine(out):
        out = await out
    return out
