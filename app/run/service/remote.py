"""Talking to a running controller over httpx: `ControllerClient`, the CLI's client and every
dashboard's ledger (`views/port.py`'s `LedgerPort`), and the `RemoteEngine` it runs against."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from ...engine.intents import Intent, Reply
from ...ledger.readonly import QueryFailed, QueryRefused, QueryResult
from ...views.jobs import JobOutput, JobRow, from_json, output_from_json
from ...views.snapshot import FleetReadout
from . import api, registry
from .target import Target

if TYPE_CHECKING:
    from ...views.detail import InstanceDetail

RECONNECT_S = 1.0
STREAM_READ_TIMEOUT_S = 15.0  # three keepalives missed: the link or the controller is dead


def raise_for(resp: httpx.Response) -> None:
    """Turn an error answer into the exception the in-process code would have raised."""
    if resp.status_code < 400:
        return
    try:
        err = resp.json()["error"]
        kind, message = str(err["type"]), str(err["message"])
    except (ValueError, KeyError, TypeError):
        kind, message = "error", resp.text[:300] or resp.reason_phrase
    if kind == "query_refused":
        raise QueryRefused(message)
    if kind == "query_failed":
        raise QueryFailed(message)
    raise api.ServiceError(f"{message} ({resp.status_code})")


class ControllerClient:
    """The controller's API, a call at a time; its ledger's queries run on the controller's
    read-only connection, since it holds the file."""

    def __init__(self, target: Target, timeout: float = 30.0) -> None:
        self.target = target
        self._http = httpx.Client(timeout=timeout, **target.httpx_args(asynchronous=False))
        self._running: str | None = None  # the query `interrupt` cancels

    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise api.ControllerGone(
                f"no answer from the controller at {self.target.describe()}: {exc}"
            ) from None

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        resp = self._send(method, path, **kw)
        raise_for(resp)
        return resp.json()

    def status(self) -> dict[str, Any]:
        return dict(self._call("GET", "/v1/status"))

    def snapshot(self) -> FleetReadout:
        return api.snap_from_json(self._call("GET", "/v1/snapshot"))

    def detail(self, instance_id: int, logs: bool = True) -> InstanceDetail:
        from ...views.detail import detail_from_json

        path = f"/v1/instances/{int(instance_id)}" + ("" if logs else "?logs=0")
        return detail_from_json(self._call("GET", path))

    def jobs(self) -> list[JobRow]:
        return from_json(self._call("GET", "/v1/jobs"))

    def job_log(self, name: str) -> JobOutput:
        return output_from_json(self._call("GET", f"/v1/jobs/{quote(name, safe='')}/log"), name)

    def intent(self, intent: Intent, refusal_raises: bool = True) -> Reply:
        """What came of `intent`. A refusal raises (ServiceError), as any error answer; without
        `refusal_raises` it is the reply, as `Supervisor.apply` answers it."""
        resp = self._send("POST", "/v1/intents", json=api.intent_to_json(intent))
        if refusal_raises or resp.status_code not in (404, 409):  # a refusal carries its reply
            raise_for(resp)
        return api.reply_from_json(resp.json().get("reply"))

    def query(self, sql: str, limit: int = 10_000, offset: int = 0) -> QueryResult:
        """As `Ledger.query`: up to `limit` rows from `offset`, asked a page at a time, each page
        tagged so that `interrupt` (from another thread) cancels this query and nothing else."""
        qid = self._running = f"d{uuid.uuid4().hex[:12]}"
        rows: list[tuple[Any, ...]] = []
        try:
            while True:
                size = min(api.MAX_QUERY_ROWS, limit - len(rows))
                body = {"sql": sql, "limit": size, "offset": offset + len(rows), "id": qid}
                page = api.result_from_json(self._call("POST", "/v1/query", json=body))
                rows += page.rows
                if not page.truncated or not page.rows or len(rows) >= limit:
                    return QueryResult(page.columns, rows, page.truncated, offset)
        finally:
            self._running = None

    def interrupt(self) -> None:
        qid = self._running
        if qid is not None:
            with ControllerClient(self.target, timeout=5.0) as side:  # this one is busy
                side.cancel(qid)

    def cancel(self, query_id: str) -> bool:
        try:
            return bool(self._call("DELETE", f"/v1/query/{query_id}")["ok"])
        except api.ServiceError:
            return False  # already finished

    def receipt(self, campaign: str | None = None) -> list[dict[str, Any]]:
        params = {"campaign": campaign} if campaign else {}
        return list(self._call("GET", "/v1/receipt", params=params))

    def shutdown(self, mode: str) -> str:
        return str(self._call("POST", "/v1/shutdown", json={"mode": mode})["done"])

    def keep(self) -> None:
        self._call("POST", "/v1/keep")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _in_thread(call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
    """`call()` on a daemon thread of its own: a screen waits on the future, and a call still
    out when the dashboard quits does not hold its exit."""
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        try:
            fut.set_result(call())
        except BaseException as exc:  # noqa: BLE001 - the caller's to see, on the future
            fut.set_exception(exc)

    threading.Thread(target=run, name="rentwatch-remote-call", daemon=True).start()
    return fut


class RemoteEngine:
    """The dashboard's engine, remote: snapshots arrive over the event stream, intents leave
    as requests: the `EnginePort` (views/port.py) every dashboard uses."""

    def __init__(
        self,
        target: Target,
        pid: int | None = None,
        outlives_dashboard: bool = True,
    ) -> None:
        self.target = target
        self.pid = pid  # the controller's, when known: its death is then said as such
        # whether the controller goes on when this dashboard quits (a process of its own), so
        # quitting may leave it running; False for an engine served inside the dashboard's
        # own process, which ends with it (`--foreground`)
        self.outlives_dashboard = outlives_dashboard
        self.stop_error: str | None = None  # why a "stop" on quitting did not reach it
        self.on_snapshot: Callable[[FleetReadout], None] = lambda _: None
        self.on_error: Callable[[str], None] = lambda _: None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connected = False
        self._thread = threading.Thread(target=self._main, name="rentwatch-remote", daemon=True)
        self._stop: asyncio.Event | None = None
        # set by `shutdown`, which may come before the thread has made its loop and `_stop`
        self._leaving = threading.Event()
        self._http: httpx.AsyncClient | None = None  # the event stream's
        self._client = ControllerClient(target)
        self._stream: asyncio.Task[None] | None = None
        self._lost_said = False
        self._death_said = False
        # the controller ended on its own (it said why, `bye`): nothing it served works any
        # more; what ends the campaign's leftovers is `end_hint`, which it sent as it went
        self.ended: str | None = None
        self.end_hint = ""

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    # reads and intents: the CLI's own calls (`ControllerClient`), each on a thread of its own
    def detail(self, instance_id: int, logs: bool = True) -> concurrent.futures.Future[Any]:
        return _in_thread(lambda: self._client.detail(instance_id, logs))

    def jobs(self) -> concurrent.futures.Future[Any]:
        return _in_thread(self._client.jobs)

    def job_log(self, name: str) -> concurrent.futures.Future[Any]:
        return _in_thread(lambda: self._client.job_log(name))

    def submit(self, intent: Intent) -> concurrent.futures.Future[Any]:
        """An operator intent to the controller; a refusal is its reply, as `Supervisor.apply`'s."""
        return _in_thread(lambda: self._client.intent(intent, refusal_raises=False))

    def _main(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.loop.run_until_complete(self._run())
        finally:
            self.loop.close()

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        if self._leaving.is_set():
            self._stop.set()
        self._http = httpx.AsyncClient(timeout=30.0, **self.target.httpx_args(asynchronous=True))
        try:
            while not self._stop.is_set():
                self._stream = asyncio.create_task(self._consume())
                try:
                    await self._stream
                except asyncio.CancelledError:
                    if not self._stop.is_set():
                        raise
                except (httpx.HTTPError, api.ServiceError, ValueError) as exc:
                    # said again once its death shows (a killed process closes its sockets a
                    # moment before it is dead to signal 0); after a `bye`, it exited: no death
                    late_death = self.ended is None and not self._death_said and self._dead()
                    if not self._lost_said or late_death:
                        self.on_error(self._lost(exc))
                        self._lost_said = True
                self.connected = False
                if self._stop.is_set():
                    break
                if not self._lost_said:
                    self.on_error(
                        f"the controller at {self.target.describe()} ended the stream; "
                        "reconnecting…"
                    )
                    self._lost_said = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), RECONNECT_S)
        finally:
            await self._http.aclose()

    def _dead(self) -> bool:
        return self.pid is not None and not registry.pid_alive(self.pid)

    def _lost(self, exc: Exception) -> str:
        """The line that says the controller is gone: dead, or only out of reach."""
        if self._dead():
            self._death_said = True
            return (
                f"lost the controller: its process (pid {self.pid}) has died. Nothing supervises "
                "the fleet now; verified hosts stop themselves once its heartbeat is silent, and "
                "a controller started again on the same ledger adopts what is left "
                "(reconnecting when one serves here…)"
            )
        return (
            f"lost the controller at {self.target.describe()} ({type(exc).__name__}); the fleet "
            "is in its hands, not this dashboard's: reconnecting…"
        )

    async def _consume(self) -> None:
        async for event, data in self._events():
            if event == "snapshot":
                if not self.connected and self._lost_said:
                    self.on_error(f"reconnected to the controller at {self.target.describe()}")
                self.connected, self._lost_said, self._death_said = True, False, False
                self.ended = None  # serving again (a controller restarted here)
                self.on_snapshot(api.snap_from_json(data))
            elif event == "bye":
                self.ended, self.end_hint = str(data.get("reason", "")), str(data.get("end") or "")
                self.on_error(f"the controller is shutting down: {self.ended}")
                self._lost_said = True  # its end is said: no "lost" and no "died" after it

    def _halt(self) -> None:
        assert self._stop is not None
        self._stop.set()
        if self._stream is not None:
            self._stream.cancel()

    async def _events(self) -> AsyncIterator[tuple[str, Any]]:
        assert self._http is not None and self._stop is not None
        timeout = httpx.Timeout(10.0, read=STREAM_READ_TIMEOUT_S)
        async with self._http.stream("GET", "/v1/events", timeout=timeout) as resp:
            if resp.status_code >= 400:
                await resp.aread()
                raise_for(resp)
            # events split by hand on the bytes: a snapshot is one line of half a megabyte
            # at 1,000 instances, which a text line iterator handles far more slowly
            buf = bytearray()
            seen = 0  # bytes of buf already searched for the blank line that ends an event
            async for chunk in resp.aiter_raw():
                if self._stop.is_set():
                    return
                buf += chunk
                while (end := buf.find(b"\n\n", max(0, seen - 1))) >= 0:
                    block = bytes(buf[:end])
                    del buf[: end + 2]
                    seen = 0
                    event, data = "message", b""
                    for line in block.split(b"\n"):
                        if line.startswith(b"event:"):
                            event = line[6:].strip().decode()
                        elif line.startswith(b"data:"):
                            data += line[5:].strip()
                    if data:
                        yield event, json.loads(data)
                seen = len(buf)

    def shutdown(self, mode: str = "leave", timeout: float = 60.0) -> None:
        """Leave. `stop` first asks the controller to end the campaign (why it could not is kept in
        `stop_error`); any other mode leaves the controller and its fleet running."""
        if mode == "stop":
            with ControllerClient(self.target, timeout=timeout) as client:
                try:
                    client.shutdown("stop")
                except api.ServiceError as exc:
                    self.stop_error = str(exc)
        self._leaving.set()
        if self.loop is not None and self._stop is not None:
            # a loop that closes meanwhile has ended already: it saw `_leaving`, or failed
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self._halt)
        self._thread.join(timeout)
        self._client.close()
