"""The adapter between the service and the engine: the only module of `run/service/` that touches
the supervisor, the headless run or the ledger's connection. It answers snapshots (cached per
poll), intents, read-only queries and receipts, and a shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ...core.errors import RentwatchError
from ...core.text import clean
from ...engine.ending import end_command
from ...engine.intents import Intent, Reply
from ...engine.supervisor import Supervisor
from ...ledger.readonly import QueryResult
from ...views.jobs import live, read_output
from ...views.snapshot import snapshot
from ..engine_thread import EngineThread
from . import api
from .api import NotHeld, NotReady, Refused
from .server import ServiceServer, serve

SNAPSHOT_MAX_AGE_S = 1.0  # wall seconds a snapshot is reused between polls (timers still tick)


class Controller:
    def __init__(
        self,
        campaign: str,
        ledger_path: Path,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.campaign = campaign
        self.ledger_path = ledger_path
        self._wall = wall  # wall-clock seconds: the start and uptime `rentwatch ls` shows
        self._monotonic = monotonic  # the snapshot cache's age
        self.started_at = wall()
        self.closing = asyncio.Event()
        self._sup: Supervisor | None = None
        self._snap: tuple[tuple[int, int, int], float, dict[str, Any]] | None = None
        self._ids = itertools.count(1)
        self._end: Callable[[str], Awaitable[None]] | None = None
        self._gen = 0  # bumped by each poll and each intent: streams wake on it
        self.changed = asyncio.Event()
        # who watches: dashboards streaming now, since when none has, and whether a person
        # chose to leave it running (a demo nobody watches and nobody kept ends itself)
        self.watchers = 0
        self._unwatched_since = monotonic()
        self.kept = False

    def watch_started(self) -> None:
        self.watchers += 1

    def watch_ended(self) -> None:
        self.watchers = max(0, self.watchers - 1)
        if self.watchers == 0:
            self._unwatched_since = self._monotonic()

    def unwatched_for(self) -> float:
        """Seconds since the last dashboard stopped watching (0 while one watches)."""
        return 0.0 if self.watchers else self._monotonic() - self._unwatched_since

    # -- binding ---------------------------------------------------------------------------
    def bind(self, sup: Supervisor, end: Callable[[str], Awaitable[None]] | None = None) -> None:
        """Called once the session's supervisor exists (the ledger is open by then). `end`
        ends the session for a shutdown request; without it, the headless run's way."""
        self._sup = sup
        self._end = end
        sup.listeners.append(self.touch)  # after each poll: push the new state at once

    def touch(self) -> None:
        self._gen += 1
        woken, self.changed = self.changed, asyncio.Event()
        woken.set()

    def _need(self) -> Supervisor:
        if self._sup is None:
            raise NotReady("the controller is still starting; try again in a moment")
        return self._sup

    def close(self) -> None:
        self.closing.set()
        if self._sup is not None:
            self._sup.ledger.interrupt()

    def farewell(self) -> dict[str, Any]:
        """What an attached dashboard is told as the controller goes: why, and the end command."""
        sup = self._sup
        if sup is None:
            return {"reason": "the controller is shutting down", "ended": False, "end": ""}
        if sup.finished is not None:
            why = f"campaign ended: {sup.finished.reason}"
        elif sup.failure:
            why = f"the engine failed: {sup.failure}"
        else:
            why = "the controller is shutting down"
        return {
            "reason": clean(why, 300),
            "ended": sup.finished is not None,
            "end": end_command(self.campaign, self.ledger_path, sup.market.base_url),
        }

    # -- reads -----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        sup = self._need()
        key = (sup.polls, sup.journal.lines_total, self._gen)
        now = self._monotonic()
        if self._snap is None or self._snap[0] != key or now - self._snap[1] > SNAPSHOT_MAX_AGE_S:
            self._snap = (key, now, api.snap_to_json(snapshot(sup, sup.now())))
        return self._snap[2]

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "api": api.API_VERSION,
            "campaign": self.campaign,
            "pid": os.getpid(),
            "ledger": str(self.ledger_path),
            "started_at": self.started_at,
            "uptime_s": self._wall() - self.started_at,
            "ready": self._sup is not None,
            "queries": self.running_queries(),  # ledger queries running now, by id
        }
        if self._sup is not None:
            snap = self.snapshot()
            live = [i for i in snap["instances"] if i["ended_at"] is None]
            out.update(
                policy=snap["policy"],
                fleet=snap["fleet"],
                # its own live rentals: not the instances it only observes (the bar's count)
                held=sum(1 for i in live if i.get("supervised", True)),
                # its stopped rentals: not live, but billing storage until destroyed
                stopped=sum(
                    1
                    for i in snap["instances"]
                    if i.get("phase") == "stopped" and i.get("supervised", True)
                ),
                observed=snap.get("observed", 0),
                verified=snap["verified"],
                in_service=snap["in_service"],
                spent_usd=snap["spent_usd"],
                # as the dashboard's "$/h now": storage of stopped rentals counts, a booting
                # one's GPU does not (the listed $/h of each live one overstated and missed both)
                dph=snap["dph_now"],
                finished=snap["finished"],
            )
        return out

    async def detail(self, instance_id: int, logs: bool = True) -> dict[str, Any]:
        from ...views.detail import NoSuchInstance, build, detail_to_json

        try:
            return detail_to_json(await build(self._need(), instance_id, logs))
        except NoSuchInstance as exc:
            raise NotHeld(str(exc)) from None

    async def jobs(self) -> list[dict[str, Any]]:
        return [dataclasses.asdict(r) for r in live(self._need())]

    async def job_log(self, name: str) -> dict[str, Any]:  # NoSuchJob: the server's 404
        return dataclasses.asdict(await read_output(self._need(), name))

    # -- intents ---------------------------------------------------------------------------
    async def apply(self, intent: Intent) -> Reply:
        """One operator intent, through the engine's one door (`Supervisor.apply`)."""
        sup = self._need()
        try:
            return await sup.apply(intent)
        finally:
            self.touch()  # the operator sees the outcome in the next snapshot, not a poll later

    async def shutdown(self, mode: str) -> str:
        """End the campaign now: `stop` releases everything held (as at a campaign's end),
        `detach` leaves the fleet running, recorded, for a later controller to adopt."""
        sup = self._need()
        if self._end is None and sup.finished is not None:
            raise Refused(f"the campaign has already ended ({sup.finished.reason})")
        sup.journal.say(f"end    shutdown asked through the controller API: {mode}")
        if self._end is not None:  # the dashboard's engine: it ends its own way
            await self._end(mode)
        else:  # detached: the headless run's end records each instance left running
            sup.shut_down(mode == "detach", f"operator shut the controller down ({mode})")
        return f"shutting down: {'stop all held' if mode == 'stop' else 'leave the fleet running'}"

    # -- the ledger ------------------------------------------------------------------------
    async def query(self, sql: str, limit: int, offset: int, query_id: str | None) -> QueryResult:
        """One page of a read-only query in the ledger's sandbox, tagged so that cancelling it
        (`cancel`, or the client hanging up) interrupts this query and nothing else."""
        ledger = self._need().ledger
        qid = query_id or f"q{next(self._ids)}"
        if qid in ledger.queries_running():
            raise api.BadRequest(f"query id {qid!r} is already running")
        try:
            return await asyncio.to_thread(ledger.query, sql, limit, offset, qid)
        except asyncio.CancelledError:
            ledger.interrupt(qid)
            raise

    def cancel(self, query_id: str) -> bool:
        return self._need().ledger.interrupt(query_id)

    def look(self, named: tuple[int, ...]) -> list[int]:
        """A verified webhook: a poll now, asking about the instances it names that the
        campaign holds or watches (the rest are left to the list). Returns those."""
        if self._sup is None:
            return []
        held = [i for i in named if i in self._sup.fleet.attempts]
        self._sup.cadence.soon(held)
        return held

    def running_queries(self) -> list[str]:
        return self._sup.ledger.queries_running() if self._sup is not None else []

    async def receipt(self, campaign: str | None) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._need().ledger.receipt, campaign)


# how long `EngineService.start` waits for the engine to be up, then for its socket to serve
# (`spawn.START_S`, the wait for a spawned controller to register, covers both)
READY_S = 120.0
SERVE_S = 30.0


class EngineFailed(RentwatchError):
    title = "engine"


class EngineService:
    """The dashboard's engine thread, served: the dashboard attaches to it over the socket like any
    other, so there is one dashboard code path, `ls` lists it and `ledger` answers."""

    def __init__(self, engine: EngineThread, ledger_path: Path, campaign: str) -> None:
        self.engine = engine
        self.ctrl = Controller(campaign, ledger_path)
        self.server: ServiceServer | None = None
        self._ending: asyncio.Task[None] | None = None
        self._end_mode = "stop"

    def start(self, timeout: float = READY_S) -> str:
        """Start the engine (if not yet), wait until it is up, serve it; returns the socket."""
        said: list[str] = []
        shown = self.engine.on_error
        self.engine.on_error = said.append  # until a dashboard is there to show them
        if not self.engine.alive():
            self.engine.start()
        self.engine.ready.wait(timeout)
        self.engine.on_error = shown
        session, loop = self.engine.session, self.engine.loop
        sup = session.sup if session is not None else None
        # before `ready`, the engine says something only when it could not start
        if said or sup is None or loop is None or loop.is_closed():
            raise EngineFailed(said[-1] if said else "the engine did not start in time")

        async def served() -> ServiceServer:
            self.ctrl.bind(sup, end=self._end)
            return await serve(self.ctrl)

        self.server = asyncio.run_coroutine_threadsafe(served(), loop).result(SERVE_S)
        return str(self.server.socket_path)

    async def _end(self, mode: str) -> None:
        """A shutdown asked over the API: answer first, then close the server and let the
        engine release (stop) or record (detach) what it holds, off the engine's own loop."""

        async def later() -> None:
            await asyncio.sleep(0.1)  # the shutdown request gets its answer
            assert self.server is not None
            try:
                await self.server.stop()
            finally:  # the engine ends however the server's close went
                threading.Thread(target=self.engine.shutdown, args=(mode,), daemon=True).start()

        self._end_mode = mode
        self._ending = asyncio.get_running_loop().create_task(later())

    def stop(self, mode: str, say: Callable[[str], None] | None = None) -> None:
        """The dashboard has quit with `mode`: close the server, then end the engine (a no-op
        when a shutdown request already ended it), waiting as long as its release takes."""
        loop, server = self.engine.loop, self.server
        assert server is not None
        if loop is not None and loop.is_running() and not self.ctrl.closing.is_set():
            # the loop may end under us: the files below still go
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        self.ctrl.close()
        if self._ending is not None:  # a shutdown request already chose how to end: end so
            # now, whether or not its own end got there (the engine's shutdown is idempotent)
            self.engine.shutdown(self._end_mode, say)
        elif self.engine.alive():
            self.engine.shutdown(mode, say)
        server.forget()


def attach_in_process(
    engine: EngineThread, ledger_path: Path, campaign: str
) -> tuple[Any, Callable[[str | None], None]]:
    """The dashboard of `watch --foreground` and `demo --foreground`: the engine in this process,
    served on a socket, the app attached through the client; quitting ends the engine. Returns
    the app and what to call once it has quit."""
    from rentwatch.widgets.app import RentwatchApp

    from .remote import ControllerClient, RemoteEngine
    from .target import Target

    service = EngineService(engine, ledger_path, campaign)
    print("rentwatch: starting the engine…", flush=True)
    try:
        sock = service.start()
    except OSError as exc:  # the engine's own failure (EngineFailed) says itself
        raise api.ServiceError(f"cannot serve the engine's controller API: {exc}") from None
    target = Target(socket=sock)
    remote = RemoteEngine(target, os.getpid(), campaign, outlives_dashboard=False)
    app = RentwatchApp(remote, ControllerClient(target, timeout=600.0))

    def finish(mode: str | None) -> None:
        if remote.alive():  # the app ended without its quit dialog: its stream ends with it
            remote.shutdown("leave")
        service.stop(mode if mode in ("stop", "detach") else "trap")

    return app, finish
