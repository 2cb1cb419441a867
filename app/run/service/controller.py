"""The adapter between the service and the engine: the only module of `run/service/` that touches
the supervisor or the ledger's connection. It answers snapshots (cached per
poll), intents, read-only queries and receipts, and a shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
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
from . import api
from .api import NotHeld, NotReady

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
        self.closing = False  # the server is closing: each stream says goodbye
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
        """Called once the session's supervisor exists (the ledger is open by then). `end`: the
        host's answer to a shutdown request (`host.Host`: it may refuse one)."""
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
        self.closing = True
        self.touch()  # a stream waiting for the next change wakes to say goodbye
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
            # its own rentals: not the instances it only observes (the bar's count)
            own = [i for i in snap["instances"] if i.get("supervised", True)]
            out.update(
                {k: snap[k] for k in ("policy", "fleet", "verified", "in_service", "spent_usd")},
                held=sum(1 for i in own if i["ended_at"] is None),
                # not live, but billing storage until destroyed
                stopped=sum(1 for i in own if i.get("phase") == "stopped"),
                observed=snap.get("observed", 0),
                # as the dashboard's "$/h now": storage of stopped rentals counts, a booting
                # one's GPU does not (the listed $/h of each live one overstated and missed both)
                dph=snap["dph_now"],
                finished=snap["finished"],
            )
        return out

    async def detail(self, instance_id: int, logs: bool = True) -> dict[str, Any]:
        from ...views.detail import NoSuchInstance, build

        try:
            return dataclasses.asdict(await build(self._need(), instance_id, logs))
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
        if self._end is None:
            raise NotReady("the controller is still starting; try again in a moment")
        await self._end(mode)
        sup.journal.say(f"end    shutdown asked through the controller API: {mode}")
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


# how long `EngineThread.start` waits for the engine to be up and served (`spawn.START_S`, the
# wait for a spawned controller to register, covers it)
READY_S = 150.0


class EngineFailed(RentwatchError):
    title = "engine"
