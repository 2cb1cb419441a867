"""The engine's own thread for a `--foreground` dashboard, so no marketplace, SSH or DuckDB call
runs on the UI's event loop: hosted there as a controller process hosts it (`host.run_headless`),
served on the ledger's socket, so the dashboard attaches to it like any other controller."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable

from ..engine.session import Session
from .host import Host, Hosting
from .service.controller import READY_S, EngineFailed
from .service.server import ServiceServer


class EngineThread:
    def __init__(
        self,
        run: Callable[..., Awaitable[int]],
        max_wall_poll: float = 1.0,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        """`run`: `run_headless` given all but its `hosting` and `hosted`; `loop_factory`: the
        engine's event loop (tests give one on a simulator's stepped clock,
        `rentwatch.referee.stepped.stepped_loop`)."""
        self._host_session = run
        self._loop_factory = loop_factory
        self._plan = Hosting(for_dashboards=True, cap_s=max_wall_poll, who="dashboard", tell=None)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.host: Host | None = None
        self.socket: str | None = None
        self._thread = threading.Thread(target=self._main, name="rentwatch-engine", daemon=True)
        self.ready = threading.Event()
        self._asked: str | None = None  # an end asked for before the host existed
        self._failure: str | None = None

    @property
    def session(self) -> Session | None:
        return self.host.session if self.host is not None else None

    @property
    def failure(self) -> str | None:
        """What keeps the engine from working, until it clears: the dashboard's exit status."""
        return self.host.failure if self.host is not None else self._failure

    def start(self, timeout: float = READY_S) -> str:
        """Start the engine, wait until it is up and served; returns the socket."""
        self._thread.start()
        self.ready.wait(timeout)
        if self.failure or self.socket is None:
            raise EngineFailed(self.failure or "the engine did not start in time")
        return self.socket

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
            self.loop.run_until_complete(
                self._host_session(hosting=self._plan, hosted=self._hosted)
            )
        except EngineFailed:
            pass  # its failure is the host's, `start` raises it
        except Exception as exc:
            self._failure = f"engine could not start: {exc}"
        finally:
            self.ready.set()
            self.loop.close()

    def _hosted(self, host: Host, server: ServiceServer | None) -> None:
        assert server is not None and server.socket_path is not None  # a dashboard's must serve
        self.host, self.socket = host, str(server.socket_path)
        host.started = self.ready.set
        if self._asked is not None:
            host.stop(self._asked)

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
