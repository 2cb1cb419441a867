"""The engine's own thread for a `--foreground` dashboard, so no marketplace, SSH or DuckDB call
runs on the UI's event loop: hosted there as a controller process hosts it (`host.Host`), served on
the ledger's socket, so the dashboard attaches to it like any other controller."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from ..engine.session import Session
from ..engine.supervisor import Supervisor
from ..ledger.team.sync import TeamSync
from .alerts import Alerts
from .host import Host, Hosting
from .service.controller import READY_S, Controller, EngineFailed
from .service.server import ServiceServer, serve


class EngineThread:
    def __init__(
        self,
        open_session: Callable[[], Session],
        on_error: Callable[[str], None],
        max_wall_poll: float = 1.0,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
        open_alerts: Callable[[Supervisor], Alerts] | None = None,
        sync: TeamSync | None = None,
    ) -> None:
        """`loop_factory`: the engine's event loop (tests give one on a simulator's stepped
        clock, `rentwatch.referee.stepped.stepped_loop`)."""
        self._open = open_session
        self._loop_factory = loop_factory
        self.on_error = on_error
        self._plan = Hosting(for_dashboards=True, cap_s=max_wall_poll, who="dashboard", tell=None)
        self._open_alerts = open_alerts
        self._sync = sync
        self.loop: asyncio.AbstractEventLoop | None = None
        self.session: Session | None = None
        self.host: Host | None = None
        self._thread = threading.Thread(target=self._main, name="rentwatch-engine", daemon=True)
        self.ready = threading.Event()
        self._asked: str | None = None  # an end asked for before the host existed
        self._failure: str | None = None
        self.server: ServiceServer | None = None

    @property
    def failure(self) -> str | None:
        """What keeps the engine from working, until it clears: the dashboard's exit status."""
        return self.host.failure if self.host is not None else self._failure

    def start(self, timeout: float = READY_S) -> str:
        """Start the engine, wait until it is up and served; returns the socket."""
        said: list[str] = []
        shown, self.on_error = self.on_error, said.append  # until a dashboard can show them
        self._thread.start()
        self.ready.wait(timeout)
        self.on_error = shown
        # before `ready`, the engine says something only when it could not start
        if said or self.server is None:
            raise EngineFailed(said[-1] if said else "the engine did not start in time")
        return str(self.server.socket_path)

    def alive(self) -> bool:
        """Whether the engine's thread still runs (it owns instances until it ends)."""
        return self._thread.is_alive()

    def join(self) -> None:
        """Wait for the engine's thread to end: its thread is a daemon, and exiting under its
        release would leave rentals billing."""
        self._thread.join()

    def _main(self) -> None:
        self.loop = self._loop_factory()
        try:
            self.loop.run_until_complete(self._run())
        finally:
            self.loop.close()

    async def _run(self) -> None:
        try:
            session = self.session = self._open()
        except Exception as exc:
            self._failure = f"engine could not start: {exc}"
            self.on_error(self._failure)
            self.ready.set()
            return
        ctrl = Controller(session.sup.campaign.name, session.ledger.path)
        try:
            self.server = await serve(ctrl)
        except OSError as exc:
            self._failure = f"cannot serve the engine's controller API: {exc}"
            self.on_error(self._failure)
            self.ready.set()
            await session.end(self._failure)
            return
        host = self.host = Host(
            session,
            ctrl,
            self._plan,
            self._open_alerts,
            self._sync,
            on_error=lambda line: self.on_error(line),
            started=self.ready.set,
        )
        if self._asked is not None:
            host.stop(self._asked)
        try:
            await host.run()
        except EngineFailed:
            pass  # its failure said, `start` raises it
        finally:
            await self.server.stop()

    def shutdown(self, mode: str = "stop") -> None:
        """End the engine with `mode`, unless an earlier ask (a shutdown request) chose one, and
        wait until its release (or detach) is done."""
        if self.host is None or self.loop is None:
            self._asked = self._asked or mode
        elif self.alive():
            with contextlib.suppress(RuntimeError):  # its loop closed meanwhile: it has ended
                self.loop.call_soon_threadsafe(self.host.stop, mode)
        if self.alive():
            self.join()
        elif self.server is not None:  # its loop is gone: the files it served from still go
            self.server.forget()
