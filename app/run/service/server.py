"""The controller's HTTP API (aiohttp; its routes in `ServiceServer.app`, each documented in
docs/service.md), on a Unix socket created 0600 and, when asked, on TCP where every request must
carry the token from a 0600 token file. Errors are JSON `{"error": {"type", "title", "message"}}`;
the market's API key is never in an answer. Both sockets are served by `listener.Listener`. On
TCP, `GET /metrics` and, with `VAST_WEBHOOK_SECRET`, Vast's signed webhooks share the listener; a
verified webhook is a reason to poll now, never a verdict: the payload never changes a rental."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import secrets
import socket
import stat
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from ...core.errors import RentwatchError
from ...ledger.readonly import QueryFailed, QueryRefused
from ...notify.metrics import Metrics
from ...notify.metrics import parse_listen as host_port
from ...notify.webhooks import WebhookEvent, WebhookVerifier, webhook_handler
from ...views.jobs import NoSuchJob
from . import api, registry
from .api import NotHeld, NotReady, Refused
from .listener import Listener, quiet_http_errors

if TYPE_CHECKING:
    from .controller import Controller

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SSE_MIN_GAP_S = 0.05  # a burst of polls (a fast time scale) is coalesced to this rate
SSE_MAX_GAP_S = 1.0  # without any change, a fresh snapshot this often (timers tick)
SSE_KEEPALIVE_S = 5.0  # a comment line this often, so a dead link is noticed
TRACE_BURST_S = 60.0  # wall seconds between two tracebacks of failed requests
WEBHOOK_PATH = "/v1/webhooks/vast"
# a handler's exception as its answer, the first that matches: (types, status, error type); a
# RentwatchError last (the market refused, a host failed: the operator's to see)
ANSWERS: tuple[tuple[type[Exception] | tuple[type[Exception], ...], int, str], ...] = (
    (api.BadRequest, 400, "bad_request"),
    (QueryRefused, 400, "query_refused"),
    (QueryFailed, 400, "query_failed"),
    (NotReady, 503, "not_ready"),
    ((NotHeld, NoSuchJob), 404, "not_held"),
    (Refused, 409, "refused"),
    (RentwatchError, 502, "engine_error"),
)
SECRET_ENV = "VAST_WEBHOOK_SECRET"


def parse_listen(spec: str) -> tuple[str, int]:
    """`tcp:HOST:PORT` -> (host, port), HOST:PORT read as `--metrics` reads it."""
    kind, _, rest = spec.partition(":")
    if kind != "tcp":
        raise RentwatchError(f"--listen wants tcp:HOST:PORT, not {spec!r}")
    return host_port(rest, flag="--listen")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


def _error(status: int, kind: str, message: str, title: str | None = None) -> web.Response:
    return _json(api.error_body(kind, message, title), status)


def _is_tcp(request: web.Request) -> bool:
    return isinstance(
        request.transport.get_extra_info("sockname") if request.transport else None, tuple
    )


class ServiceServer:
    def __init__(
        self,
        ctrl: Controller,
        extra_routes: Sequence[web.RouteDef] = (),
        open_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.ctrl = ctrl
        # more routes on the same listener (the metrics, the market's webhooks); `open_paths`
        # carry their own authentication (a webhook's signature) instead of the token
        self.extra_routes = list(extra_routes)
        self.open_paths = open_paths
        self.socket_path: Path | None = None
        self.url: str | None = None
        self.token_file: Path | None = None
        self._token: str | None = None
        self._runner: web.AppRunner | None = None
        self._streams: set[asyncio.Task[Any]] = set()
        self._stopping: asyncio.Future[None] | None = None
        self.listeners: list[Listener] = []
        self.entry: registry.Entry | None = None  # once registered for `ls`, `attach`, `ledger`
        self._traced_at: float | None = None
        self._traces_held = 0
        self.monotonic = time.monotonic  # the clock the traceback's rate limit reads

    # -- the app ---------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=api.MAX_BODY_BYTES, middlewares=[self._guard])
        app.add_routes(
            [
                web.get("/v1/status", self.status),
                web.get("/v1/snapshot", self.snapshot),
                web.get("/v1/instances/{iid}", self.instance),
                web.get("/v1/jobs", self.jobs),
                web.get("/v1/jobs/{name}/log", self.job_log),
                web.get("/v1/events", self.events),
                web.post("/v1/intents", self.intents),
                web.post("/v1/query", self.query),
                web.delete("/v1/query/{qid}", self.cancel),
                web.get("/v1/receipt", self.receipt),
                web.post("/v1/shutdown", self.shutdown),
                web.post("/v1/keep", self.keep),
                *self.extra_routes,
            ]
        )
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The token on TCP; every error as JSON. A request that passes is its connection's first
        valid one; on a self-authenticating path that is known only from a 2xx answer."""
        if request.path in self.open_paths:
            response = await self._answer(request, handler)
            if 200 <= response.status < 300:
                self._valid(request)
            return response
        if _is_tcp(request):
            given = request.headers.get(api.TOKEN_HEADER, "")
            want = f"Bearer {self._token}"
            # a header's text may hold anything the client sent: compared as bytes, never raised
            seen = given.encode("utf-8", errors="replace")
            if not self._token or not hmac.compare_digest(seen, want.encode()):
                return _error(
                    401,
                    "unauthorized",
                    "a TCP request needs 'Authorization: Bearer <token>' from the token file",
                )
        self._valid(request)
        return await self._answer(request, handler)

    def _valid(self, request: web.Request) -> None:
        for listener in self.listeners:
            listener.valid(request.transport)

    async def _answer(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, "too_large", f"the body is over {api.MAX_BODY_BYTES} bytes")
        except web.HTTPException as exc:
            return _error(exc.status, exc.reason.lower().replace(" ", "_"), exc.text or exc.reason)
        except Exception as exc:
            for kinds, status, kind in ANSWERS:
                if isinstance(exc, kinds):
                    return _error(status, kind, str(exc), getattr(exc, "title", None))
            # a bug here must not take the campaign down: say it, go on
            self._trace(exc)
            return _error(500, "internal", f"{type(exc).__name__}: {exc}"[:500])

    def _trace(self, exc: Exception) -> None:
        """A request's unexpected error on stderr: its traceback once per `TRACE_BURST_S`, the
        rest counted (a client chooses how often it sends what fails)."""
        now = self.monotonic()
        if self._traced_at is not None and now - self._traced_at < TRACE_BURST_S:
            self._traces_held += 1
            return
        more = f" ({self._traces_held} more held back)" if self._traces_held else ""
        self._traced_at, self._traces_held = now, 0
        print(f"controller: a request failed{more}:", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)

    # -- handlers --------------------------------------------------------------------------
    async def status(self, request: web.Request) -> web.StreamResponse:
        return _json(self.ctrl.status())

    async def snapshot(self, request: web.Request) -> web.StreamResponse:
        return _json(self.ctrl.snapshot())

    async def instance(self, request: web.Request) -> web.StreamResponse:
        raw = request.match_info["iid"]
        # ASCII digits only: '²' passes str.isdigit() and fails int()
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 15:
            raise api.BadRequest("an instance id is a positive integer")
        # shielded: a dashboard closing the screen must not cut the market's log call in half
        logs = request.query.get("logs", "1") != "0"
        return _json(await asyncio.shield(self.ctrl.detail(int(raw), logs)))

    async def jobs(self, request: web.Request) -> web.StreamResponse:
        return _json(await self.ctrl.jobs())

    async def job_log(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if not name or len(name) > 64:
            raise api.BadRequest("a job name is 1 to 64 characters")
        # shielded: a screen closing must not cut an SSH session in half
        return _json(await asyncio.shield(self.ctrl.job_log(name)))

    async def events(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        task = asyncio.current_task()
        if task is not None:
            self._streams.add(task)
        self.ctrl.watch_started()
        sent: dict[str, Any] | None = None
        said = 0
        last_write = 0.0
        try:
            while not self.ctrl.closing:
                changed = self.ctrl.changed  # before the snapshot: a change after it wakes us
                try:
                    snap = self.ctrl.snapshot()
                except NotReady:
                    snap = None
                loop = asyncio.get_running_loop()
                if snap is not None and snap is not sent:
                    total = snap["decisions_total"]
                    fresh = snap["decisions"][-(total - said) :] if sent and total > said else []
                    await resp.write(api.sse_event("snapshot", snap))
                    for line in fresh:
                        await resp.write(api.sse_event("log", line))
                    sent, said, last_write = snap, total, loop.time()
                elif loop.time() - last_write >= SSE_KEEPALIVE_S:
                    await resp.write(b": alive\n\n")
                    last_write = loop.time()
                # wake on the next poll or intent, or after a while (ages and bills still
                # tick between polls); never more often than SSE_MIN_GAP_S per stream
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), SSE_MAX_GAP_S)
                gap = SSE_MIN_GAP_S - (loop.time() - last_write)
                if gap > 0:  # a burst: wait out the rest of the gap, then send the latest
                    await asyncio.sleep(gap)
            # the campaign's end (its release, the trap) changes the fleet after the last poll:
            # a dashboard still attached sees that final state before the goodbye
            with contextlib.suppress(NotReady):
                snap = self.ctrl.snapshot()
                if snap is not sent:
                    await resp.write(api.sse_event("snapshot", snap))
            await resp.write(api.sse_event("bye", self.ctrl.farewell()))
        except ConnectionResetError:
            pass  # the dashboard went away: nothing to clean up but this stream
        finally:
            self.ctrl.watch_ended()
            if task is not None:
                self._streams.discard(task)
        return resp

    async def intents(self, request: web.Request) -> web.StreamResponse:
        intent = api.intent_from_json(api.parse_body(await request.read()))
        # shielded: a dashboard that hangs up mid-intent must not cut a market call in half
        reply = await asyncio.shield(self.ctrl.apply(intent))
        if reply.refused is None:
            return _json({"ok": True, "done": reply.message, "reply": api.reply_to_json(reply)})
        kind = "not_held" if reply.not_held else "refused"
        body = {**api.error_body(kind, reply.refused), "reply": api.reply_to_json(reply)}
        return _json(body, 404 if reply.not_held else 409)

    async def query(self, request: web.Request) -> web.StreamResponse:
        body = api.parse_body(await request.read())
        if not isinstance(body, dict) or not isinstance(body.get("sql"), str):
            raise api.BadRequest('a query is {"sql": "SELECT ...", "limit": N, "offset": N}')
        # one page at most; a client pages on with `offset`
        limit = api.int_field({"limit": 1000, **body}, "limit", 0, api.MAX_QUERY_ROWS)
        offset = api.int_field({"offset": 0, **body}, "offset")
        qid = body.get("id")
        if qid is not None and not isinstance(qid, str):
            raise api.BadRequest("'id' must be a string")
        result = await self.ctrl.query(body["sql"], limit, offset, qid)
        return _json(api.result_to_json(result, offset))

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        found = self.ctrl.cancel(request.match_info["qid"])
        return _json({"ok": found}, 200 if found else 404)

    async def receipt(self, request: web.Request) -> web.StreamResponse:
        return _json(await self.ctrl.receipt(request.query.get("campaign")))

    async def keep(self, request: web.Request) -> web.StreamResponse:
        """A person chose to leave it running: it does not end itself for want of a watcher."""
        self.ctrl.kept = True
        return _json({"ok": True})

    async def shutdown(self, request: web.Request) -> web.StreamResponse:
        body = api.parse_body(await request.read())
        mode = body.get("mode") if isinstance(body, dict) else None
        if mode not in ("stop", "detach"):
            raise api.BadRequest('shutdown needs {"mode": "stop"} or {"mode": "detach"}')
        return _json({"ok": True, "done": await asyncio.shield(self.ctrl.shutdown(mode))})

    # -- lifecycle -------------------------------------------------------------------------
    async def start(
        self, socket_path: Path, tcp: tuple[str, int] | None = None, ledger: Path | None = None
    ) -> None:
        if socket_path.exists() or socket_path.is_symlink():
            if not stat.S_ISSOCK(socket_path.lstat().st_mode):
                raise OSError(f"{socket_path} exists and is not a socket; not touching it")
            if registry.socket_answers(str(socket_path)):
                raise api.AlreadyServed(f"a controller already answers on {socket_path}")
            socket_path.unlink()  # left behind by a controller that was killed
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # created 0600: no moment where another user could connect
        try:
            sock.bind(str(socket_path))
        finally:
            os.umask(old)
        os.chmod(socket_path, 0o600)
        self.socket_path = socket_path
        # a client that hangs up cancels its request: a query stops running at once
        self._runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True)
        await self._runner.setup()
        quiet_http_errors(time.monotonic)  # a malformed request line: one log line a burst
        self._listen(sock)
        if tcp is not None:
            self._token = secrets.token_urlsafe(32)
            base = ledger if ledger is not None else socket_path
            self.token_file = base.with_name(base.name + ".token")
            registry.write_private(self.token_file, self._token + "\n")
            family = socket.AF_INET6 if ":" in tcp[0] else socket.AF_INET
            tcp_sock = socket.create_server(tcp, family=family, backlog=128)
            port = tcp_sock.getsockname()[1]
            self._listen(tcp_sock)
            host = f"[{tcp[0]}]" if ":" in tcp[0] else tcp[0]
            self.url = f"http://{host}:{port}"

    def register(self, market: tuple[str, str] | None = None) -> registry.Entry:
        """Registered for `ls`, `attach` and `ledger`; with `market`, a demo's (URL, key file)."""
        url, key_file = market or (None, None)
        self.entry = registry.Entry(
            campaign=self.ctrl.campaign,
            pid=os.getpid(),
            socket=str(self.socket_path),
            ledger=str(self.ctrl.ledger_path.resolve()),
            started_at=self.ctrl.started_at,
            url=self.url,
            token_file=str(self.token_file) if self.token_file else None,
            market_url=url,
            market_key_file=key_file,
        )
        registry.register(self.entry)
        return self.entry

    def _listen(self, sock: socket.socket) -> None:
        assert self._runner is not None and self._runner.server is not None
        listener = Listener(sock, self._runner.server)
        listener.start()
        self.listeners.append(listener)

    async def stop(self) -> None:
        """Close the server (once: a second call, from the dashboard's quit racing a shutdown
        request, waits for the first to finish rather than clean the runner up twice)."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        self.ctrl.close()
        if self._streams:  # let each stream say goodbye, then cut the slow ones
            _, slow = await asyncio.wait(set(self._streams), timeout=1.0)
            for task in slow:
                task.cancel()
        for listener in self.listeners:
            await listener.close()  # no new connection while the open ones are closed
        if self._runner is not None:
            await self._runner.cleanup()
        self.forget()

    def forget(self) -> None:
        """Its socket, token file and registry entry removed (callable where its loop is gone)."""
        for path in (self.socket_path, self.token_file):
            if path is not None:
                with contextlib.suppress(OSError):
                    path.unlink()
        if self.entry is not None:
            with contextlib.suppress(OSError):
                registry.unregister(self.entry.pid)


def routes(
    metrics: Metrics | None,
    look: Callable[[tuple[int, ...]], list[int]],
    secret: str | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[list[web.RouteDef], frozenset[str], WebhookVerifier | None]:
    """The extra routes, the paths that authenticate themselves, and the verifier. `look(named)`
    asks the engine for a poll now and returns the held instances among `named`."""
    out: list[web.RouteDef] = []
    if metrics is not None:
        out.append(web.get("/metrics", make_aiohttp_handler(metrics.registry)))
    secret = secret if secret is not None else os.environ.get(SECRET_ENV)
    if not secret:
        return out, frozenset(), None
    verifier = WebhookVerifier(secret)

    def on_event(event: WebhookEvent) -> None:
        asked = look(event.named)
        about = f", asking about {' '.join(f'i:{i}' for i in asked)}" if asked else ""
        print(f"webhook {event.notif_type[:40]}: polling now{about}", file=sys.stderr)

    out.append(web.post(WEBHOOK_PATH, webhook_handler(verifier, on_event, clock)))
    return out, frozenset({WEBHOOK_PATH}), verifier
