"""The engine's own thread for the dashboard: the supervisor's loop runs there, so no
marketplace, SSH or DuckDB call ever runs on the UI's event loop. The UI receives immutable
snapshots and sends intents as coroutines to run here."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .snapshot import FleetSnap, snapshot
from .supervisor import Supervisor


class EngineThread:
    def __init__(
        self,
        build: Callable[[], Awaitable[Supervisor]],
        on_snapshot: Callable[[FleetSnap], None],
        on_error: Callable[[str], None],
        max_wall_poll: float = 1.0,
    ) -> None:
        self._build = build
        self.on_snapshot = on_snapshot
        self.on_error = on_error
        self.max_wall_poll = max_wall_poll
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sup: Supervisor | None = None
        self._thread = threading.Thread(target=self._main, name="rentwatch-engine", daemon=True)
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.exit_mode = "stop"

    def start(self) -> None:
        self._thread.start()

    def _main(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.loop.run_until_complete(self._run())
        finally:
            self.loop.close()

    async def _run(self) -> None:
        try:
            self.sup = await self._build()
            await self.sup.prepare()
        except Exception as exc:
            self.on_error(f"engine could not start: {exc}")
            self.ready.set()
            return
        self.ready.set()
        sup = self.sup
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    await sup.poll_once()
                except Exception as exc:  # shown once, the loop goes on
                    self.on_error(f"poll failed: {type(exc).__name__}: {exc}")
                self.on_snapshot(snapshot(sup, sup.now()))
                wait = min(self.max_wall_poll, sup._wall(sup.campaign.poll_s, 0.05)) - (
                    time.monotonic() - t0
                )
                await asyncio.sleep(max(0.02, wait))
        finally:
            if self.exit_mode == "detach":
                await sup.detach_all("operator chose detach on quit")
            else:
                await sup.release_all(
                    "trap" if self.exit_mode == "trap" else "human",
                    "dashboard closed: stop all held",
                )
            sup.ledger.record(
                "campaign_end",
                at=sup.now(),
                actor="engine",
                campaign=sup.campaign.name,
                reason=f"dashboard closed ({self.exit_mode})",
            )
            await sup.close()
            await sup.client.aclose()

    def submit(
        self, factory: Callable[[Supervisor], Awaitable[Any]]
    ) -> concurrent.futures.Future[Any]:
        """Run an operator intent on the engine's loop; the future carries its result or error."""
        if self.loop is None or self.sup is None:
            fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
            fut.set_exception(RuntimeError("the engine is not running"))
            return fut
        sup = self.sup

        async def call() -> Any:
            return await factory(sup)

        return asyncio.run_coroutine_threadsafe(call(), self.loop)

    def shutdown(self, mode: str = "stop", timeout: float = 60.0) -> None:
        self.exit_mode = mode
        self._stop.set()
        self._thread.join(timeout)
