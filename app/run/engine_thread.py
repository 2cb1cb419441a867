"""The engine's own thread for a controller or a `--foreground` dashboard, so no marketplace, SSH or
DuckDB call runs on the UI's event loop; served on the ledger's socket from its own loop, so the
dashboard attaches to it like any other controller, `ls` lists it and `ledger` answers."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from ..engine.rounds import rounds
from ..engine.session import Session
from ..market.errors import AuthError
from .service.controller import READY_S, Controller, EngineFailed
from .service.server import ServiceServer, serve

# how each way of ending releases what is held: (actor, reason) of its stops
RELEASES = {
    "stop": ("human", "dashboard closed: stop all held"),
    "trap": ("trap", "dashboard closed: stop all held"),
    # a demo's controller that nobody watched nor chose to leave running ends itself: no person
    # stopped anything
    "unwatched": ("rule:unwatched", "nobody watched this demo and nobody chose to keep it"),
}


class EngineThread:
    def __init__(
        self,
        open_session: Callable[[], Session],
        on_error: Callable[[str], None],
        max_wall_poll: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        """`loop_factory`: the engine's event loop (tests give one on a simulator's stepped
        clock, `rentwatch.referee.stepped.stepped_loop`)."""
        self._open = open_session
        self._loop_factory = loop_factory
        self.on_error = on_error
        self.max_wall_poll = max_wall_poll
        self._monotonic = monotonic  # wall pacing of polls only; events carry market time
        self.loop: asyncio.AbstractEventLoop | None = None
        self.session: Session | None = None
        self._thread = threading.Thread(target=self._main, name="rentwatch-engine", daemon=True)
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.exit_mode = "stop"
        # what keeps the engine from working (it could not start, the market rejects the key):
        # shown until it clears, and the dashboard's exit status when it has not cleared
        self.failure: str | None = None
        # told the supervisor once it started, on the engine's loop (the run's alerts listen)
        self.on_supervisor: Callable[[Any], None] | None = None
        self.ctrl: Controller | None = None
        self.server: ServiceServer | None = None
        self._serve_failed: Exception | None = None

    def start(self, timeout: float = READY_S) -> str:
        """Start the engine, wait until it is up and served; returns the socket."""
        said: list[str] = []
        shown, self.on_error = self.on_error, said.append  # until a dashboard can show them
        self._thread.start()
        self.ready.wait(timeout)
        self.on_error = shown
        if self._serve_failed is not None:
            raise self._serve_failed
        # before `ready`, the engine says something only when it could not start
        if said or self.server is None:
            raise EngineFailed(said[-1] if said else "the engine did not start in time")
        return str(self.server.socket_path)

    def alive(self) -> bool:
        """Whether the engine's thread still runs (it owns instances until it ends)."""
        return self._thread.is_alive()

    def join(self, say: Callable[[str], None] | None = None, every: float = 10.0) -> None:
        """Wait for the engine's thread to end: its thread is a daemon, and exiting under its
        release would leave rentals billing. `say` hears how long it has taken."""
        waited = 0.0
        while self._thread.is_alive():
            self._thread.join(every)
            waited += every
            if self._thread.is_alive() and say is not None:
                say(f"still releasing what is held ({waited:.0f} s)")

    def _main(self) -> None:
        self.loop = self._loop_factory()
        try:
            self.loop.run_until_complete(self._run())
        finally:
            self.loop.close()

    async def _run(self) -> None:
        try:
            session = self.session = self._open()
            sup = await session.start()
        except Exception as exc:
            self.failure = f"engine could not start: {exc}"
            self.on_error(self.failure)
            self.ready.set()
            if self.session is not None:
                await self.session.end(f"engine could not start: {exc}")
            return
        if self.on_supervisor is not None:
            try:
                self.on_supervisor(sup)
            except Exception as exc:  # alerts that cannot start must not stop supervision
                self.on_error(f"alerts could not start: {exc}")
        ctrl = self.ctrl = Controller(sup.campaign.name, sup.ledger.path)
        ctrl.bind(sup, end=self._asked)
        try:
            self.server = await serve(ctrl)
        except Exception as exc:  # the caller's to say; what the engine holds is released
            self._serve_failed = exc
            self.shutdown_asked("trap")
        self.ready.set()

        def failed(exc: Exception) -> None:
            if isinstance(exc, AuthError):  # said once, shown in the header until it clears
                if self.failure is None:
                    self.failure = f"the marketplace rejected the API key: {exc}"
                    self.on_error(self.failure)
            else:  # shown, and the loop goes on
                self.on_error(f"poll failed: {type(exc).__name__}: {exc}")

        def polled() -> None:
            if sup.failure is None:
                self.failure = None  # the key works again

        try:
            await rounds(
                sup, self._stop.is_set, polled, failed, self.max_wall_poll, self._monotonic, 0.05
            )
        finally:
            if self.server is not None:  # dashboards told goodbye before the release
                with contextlib.suppress(Exception):  # which goes on however the close went
                    await self.server.stop()
            ctrl.close()
            if self.exit_mode == "detach":
                await session.detach("operator chose detach on quit")
            else:
                await session.release(*RELEASES.get(self.exit_mode, RELEASES["stop"]))
            await session.end(f"dashboard closed ({self.exit_mode})")

    def shutdown_asked(self, mode: str) -> None:
        """End the engine with `mode`, unless an earlier ask (a shutdown request) chose one."""
        if not self._stop.is_set():
            self.exit_mode = mode
            self._stop.set()

    async def _asked(self, mode: str) -> None:
        self.shutdown_asked(mode)  # a shutdown over the API: the poll loop ends at its next turn

    def shutdown(self, mode: str = "stop", say: Callable[[str], None] | None = None) -> None:
        """End the engine with `mode` and wait until its release (or detach) is done."""
        self.shutdown_asked(mode)
        if self.alive():
            self.join(say)
        elif self.server is not None:  # its loop is gone: the files it served from still go
            self.server.forget()
