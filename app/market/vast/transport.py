"""How rentwatch talks to Vast: one paced, retried, size-capped HTTP call at a time, with one total
deadline, so a market that trickles or floods cannot hold the controller. The API key is held
here only, never in a repr, a log line or an exception. Refusals are read by what they say."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Self, TypeVar, cast

import httpx

from ...core.errors import MalformedAnswer
from ..errors import (
    REFUSALS,
    AnswerLost,
    AnswerTooLarge,
    ApiError,
    AuthError,
    MarketUnavailable,
    NotFound,
    QuotaExceeded,
    network_cause,
)
from ..protocol import SharedClock
from .defaults import DEFAULT_TIMEOUT

RETRYABLE = frozenset({429, 500, 502, 503, 504})
T = TypeVar("T")


def cures(exc: Exception, idempotent: bool = True) -> bool:
    """Whether another try may cure a failed one: a call the market may have acted on (not
    `idempotent`) is asked again after a 429 alone; a spent quota resets at UTC midnight."""
    if isinstance(exc, ApiError):
        retried = RETRYABLE if idempotent else {429}
        return exc.status in retried and not isinstance(exc, QuotaExceeded)
    return idempotent and not isinstance(exc, AnswerTooLarge)


class Again(Exception):
    """A try failed in a way another try may cure (`Transport._retried` makes it)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


# Minimum intervals between calls of a kind (seconds of market time): the thresholds of the 429
# examples in Vast's OpenAPI file (vast-ai/docs `api-reference/openapi.yaml`; the docs' "Rate
# limits & errors": "a minimum interval between requests", per endpoint and identity). The
# offer search (`POST /bundles/`) has none documented and is not paced here. The simulator
# enforces the same table (`sim/api.py` PACING), with no burst.
DEFAULT_MIN_INTERVALS = {
    "show": 2.0,
    "list": 1.0,
    "manage": 1.0,
    "create": 4.5,
    "destroy": 3.0,
    "charges": 1.0,
}
# change bid (`PUT /api/v0/instances/bid_price/{id}/`): threshold 5.5 in the same file
BID_MIN_INTERVAL = 5.5
# copy between instances (`PUT /api/v0/commands/copy_direct/`): x-rateLimit 3.5 (`copy.yaml`)
COPY_MIN_INTERVAL = 3.5
POLL_ATTEMPTS = 2  # tries of a list or show call made for a poll (`VastClient.polling`)
_POLLING: contextvars.ContextVar[bool] = contextvars.ContextVar("polling", default=False)
# a create waits as long as the official CLI waits for any call (vastai 1.9.1 `api/client.py`
# _DEFAULT_TIMEOUT_SECONDS = 120: "slow operations like ... instance creation")
CREATE_TIMEOUT = 120.0
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
MAX_ANSWER_BYTES = 32 * 1024 * 1024  # a list of 25 full rows is about 100 kB


class Transport:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | None = None,
        max_attempts: int = 6,
        backoff: float = 0.15,
        min_intervals: dict[str, float] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.__key = api_key
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        self.max_answer_bytes = MAX_ANSWER_BYTES
        # rows a list answer carried that could not be read: how many, and the latest (id, why)
        self.bad_row_count = 0
        self.bad_rows: list[tuple[int | None, str]] = []
        self.max_attempts = max_attempts
        self.backoff = backoff
        paced = {**DEFAULT_MIN_INTERVALS, "bid": BID_MIN_INTERVAL, "copy": COPY_MIN_INTERVAL}
        self.min_intervals = dict(paced if min_intervals is None else min_intervals)
        self._last_call: dict[str, float] = {}  # per kind: the market second of its last pacing
        self._pacing = asyncio.Lock()
        self._http = httpx.AsyncClient(
            timeout=self.timeout, transport=transport, headers={"User-Agent": "rentwatch/0.1"}
        )
        self.market_time: float | None = None  # the market's clock at the last answer
        # the latest market moment known, and the local clock then: `now()` runs on from it
        self._known: float | None = None
        self._market_time_at = 0.0
        self._time_scale, self._shared = 1.0, cast("SharedClock | None", None)
        self._one_at_a_time = asyncio.Lock()  # calls out, with a shared clock

    def __repr__(self) -> str:
        return f"VastClient({self.base_url!r}, api_key=<hidden>)"

    @contextlib.contextmanager
    def polling(self) -> Any:
        """The poll's own calls give up after `POLL_ATTEMPTS` tries: the next poll is the retry, and
        a call retrying with backoff would leave every rental unwatched meanwhile."""
        token = _POLLING.set(True)
        try:
            yield
        finally:
            _POLLING.reset(token)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- clock ----------------------------------------------------------------------------
    def share_clock(self, clock: SharedClock) -> None:
        """Read the clock of a simulator in this process (the referee's, whose scale changes:
        extrapolating the last answer at the old scale would run ahead, then step back)."""
        self._shared = clock

    @property
    def time_scale(self) -> float:  # market seconds per wall second (1 on a real market)
        return self._shared.time_scale if self._shared is not None else self._time_scale

    @time_scale.setter
    def time_scale(self, value: float) -> None:
        self._time_scale = value

    def now(self) -> float:
        """Market time: the latest moment an answer showed, advanced by local time since, scaled."""
        if self._shared is not None:
            return self._shared.now()
        return self._now_at(time.monotonic())

    def _now_at(self, local: float) -> float:
        if self._known is None:
            return time.time()
        return self._known + (local - self._market_time_at) * self.time_scale

    def _stamped(self, stamp: float) -> None:
        """An answer's `X-Market-Time`. Answers come back out of order (a slow list stamped before
        a quick stop); each stamp is a moment already past, so the clock moves on only from one
        later than the moment already known, and never runs back."""
        self.market_time, local = stamp, time.monotonic()
        if self._known is None or stamp > self._now_at(local):
            self._known, self._market_time_at = stamp, local

    def answered_at(self) -> float:
        """Market time of the last answer (the sim stamps it; a real market falls back to now)."""
        return self.market_time if self.market_time is not None else self.now()

    async def sync_clock(self) -> float:
        """Read the market's clock and terms; a real marketplace has none and keeps wall time."""
        try:
            async with self._out():  # unheld, a stepped clock could move past its timeout
                r = await self._http.get(f"{self.base_url}/sim/v0/clock", timeout=self.timeout)
            if r.status_code == 200:
                data = r.json()
                self.time_scale = float(data.get("time_scale", 1.0))
                self.market_time = self._known = float(data["now"])
                self._market_time_at = time.monotonic()
                self.gpu_billing = str(data.get("gpu_billing", "running"))
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass
        return self.now()

    # Vast's documented rule (GPU bills only while running); a simulator says its own at
    # sync_clock, where "created" is a what-if knob
    gpu_billing = "running"

    # -- pacing ---------------------------------------------------------------------------
    def _pace_now(self) -> float:
        """Market seconds to pace by: the shared clock's, else the box's own clock, scaled."""
        if self._shared is not None:
            return self._shared.now()
        return time.monotonic() * self.time_scale

    async def _paced(self, kind: str) -> None:
        """Space calls of one kind by the market's minimum interval (Vast answers one too soon
        with a 429). A wait on a shared clock lifts its hold: it may run slower than its scale
        says (the referee holds it while the engine polls)."""
        interval = self.min_intervals.get(kind, 0.0)
        if interval <= 0:
            return
        async with self._pacing:
            while (wait := self._last_call.get(kind, -math.inf) + interval - self._pace_now()) > 0:
                shared = self._shared
                with shared.waited_on() if shared is not None else contextlib.nullcontext():
                    await asyncio.sleep(wait / max(self.time_scale, 1e-9))
            self._last_call[kind] = self._pace_now()

    def _answered(self, kind: str) -> None:
        """The interval runs from the answer too: the market counts it between arrivals, and
        a call sent an interval after the last one went out may still arrive early."""
        if kind in self.min_intervals:
            at = self._pace_now()
            self._last_call[kind] = max(self._last_call.get(kind, -math.inf), at)

    # -- transport ------------------------------------------------------------------------
    async def _back_off(self, delay: float) -> None:
        """Wait `delay` seconds of the market's time, jittered (a 1/S share on a simulator at scale
        S)."""
        await asyncio.sleep(
            max(0.001, delay * random.uniform(0.5, 1.5) / max(self.time_scale, 1.0))
        )

    async def _request(
        self,
        method: str,
        path: str,
        *,
        kind: str = "other",
        params: dict[str, Any] | None = None,
        body: Any = None,
        idempotent: bool = True,
    ) -> Any:
        tries = self.max_attempts
        if _POLLING.get() and kind in ("list", "show"):
            tries = min(tries, POLL_ATTEMPTS)

        async def one_try() -> Any:
            try:
                return await self._once(method, path, kind=kind, params=params, body=body)
            except REFUSALS as exc:
                if cures(exc, idempotent):
                    raise Again(exc) from None
                raise

        return await self._retried(one_try, tries, f"{method} {path}")

    async def _retried(self, one_try: Callable[[], Awaitable[T]], tries: int, what: str) -> T:
        """The one retry loop: `one_try` again, with backoff, for as long as it raises `Again`. Out
        of tries, a garbled answer is raised as it is, any other failure as MarketUnavailable."""
        delay = self.backoff
        for attempt in range(tries):
            try:
                return await one_try()
            except Again as again:
                last = again.cause
                if isinstance(last, ApiError):
                    delay = max(delay, last.retry_after)
            if attempt + 1 < tries:
                await self._back_off(delay)
                delay = min(delay * 2, 10.0)
        if isinstance(last, MalformedAnswer):
            raise last
        failed = MarketUnavailable(f"{what} failed after {tries} attempts: {last}")
        failed.network = getattr(last, "network", None)
        raise failed

    async def _once(
        self,
        method: str,
        path: str,
        *,
        kind: str = "other",
        params: dict[str, Any] | None = None,
        body: Any = None,
        on_send: Callable[[], None] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One try: the answer's JSON, or the failure it met, typed (`AnswerLost`, `ApiError`,
        `MalformedAnswer`). `on_send` is called as the request leaves, after pacing."""
        deadline = self.timeout if timeout is None else max(self.timeout, timeout)
        await self._paced(kind)
        if on_send is not None:
            on_send()
        try:
            r = await asyncio.wait_for(
                self._send(method, f"{self.base_url}{path}", params, body, deadline),
                max(deadline, 1e-3),
            )
        except (httpx.TimeoutException, TimeoutError):
            lost = AnswerLost(f"{method} {path} timed out after {deadline:g}s")
            lost.network = f"timed out after {deadline:g}s"
            raise lost from None
        except httpx.TransportError as exc:
            lost = AnswerLost(f"{method} {path}: {type(exc).__name__}")
            lost.network = network_cause(exc)
            raise lost from None
        self._answered(kind)
        stamp = r.headers.get("X-Market-Time")
        if stamp:
            with contextlib.suppress(ValueError):
                self._stamped(float(stamp))
        if r.status_code in REDIRECTS:  # moved where it was not followed: not done
            raise ApiError(
                r.status_code,
                "redirect",
                f"{method} {path} moved to {r.headers.get('Location', '?')[:200]}",
            )
        if r.status_code >= 400:
            err = self._error(r)
            with contextlib.suppress(ValueError):
                err.retry_after = min(float(r.headers.get("Retry-After") or 0), 60.0)
            raise err
        try:
            data = r.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise MalformedAnswer(
                f"{method} {path}: the answer is not JSON ({len(r.content)} bytes)"
            ) from None
        if isinstance(data, dict) and data.get("success") is False:
            # a refusal dressed as a 2xx (some endpoints answer 200 with it)
            raise self._error(r, data)
        return data

    async def _send(
        self, method: str, url: str, params: dict[str, Any] | None, body: Any, timeout: float
    ) -> httpx.Response:
        """One call, following the market's redirects with the key as the official CLI does (vastai
        1.9.1 `VastSession.rebuild_auth`: the same scheme, port and host or both under vast.ai);
        a redirect elsewhere comes back as it is."""
        async with self._out():
            resp = await self._exchange(method, url, params, body, timeout)
            for _ in range(MAX_REDIRECTS):
                where = resp.headers.get("Location")
                if resp.status_code not in REDIRECTS or not where:
                    return resp
                target = resp.request.url.join(where)
                if not same_service(resp.request.url, target):
                    return resp
                if resp.status_code == 303 or (resp.status_code in (301, 302) and method == "POST"):
                    method, body = "GET", None  # as requests and httpx rewrite them
                resp = await self._exchange(method, str(target), None, body, timeout)
            return resp

    @contextlib.asynccontextmanager
    async def _out(self) -> AsyncIterator[None]:
        """One exchange with the market out. On a shared clock it holds the clock, and calls are
        answered one at a time in the order they went out, not the box's order."""
        if self._shared is None:
            yield
            return
        async with self._shared.held(), self._one_at_a_time:
            yield

    async def _exchange(
        self, method: str, url: str, params: dict[str, Any] | None, body: Any, timeout: float
    ) -> httpx.Response:
        """One exchange, its answer read to the end but never past `max_answer_bytes`."""
        req = self._http.build_request(
            method,
            url,
            params=params,
            json=body,
            headers={"Authorization": f"Bearer {self.__key}"},
            timeout=timeout,
        )
        resp = await self._http.send(req, stream=True)
        try:
            declared = resp.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > self.max_answer_bytes:
                raise AnswerTooLarge(f"{method} answer of {declared} bytes is over the cap")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > self.max_answer_bytes:
                    raise AnswerTooLarge(
                        f"{method} answer passed {self.max_answer_bytes} bytes: not read further"
                    )
                chunks.append(chunk)
        finally:
            await resp.aclose()
        return httpx.Response(
            resp.status_code, headers=resp.headers, content=b"".join(chunks), request=req
        )

    @staticmethod
    def _error(r: httpx.Response, data: Any = None) -> ApiError:
        code, msg = "http_error", r.reason_phrase
        try:
            if data is None:
                data = r.json()
            if isinstance(data, dict):
                code = str(data.get("error") or code)
                # the docs: "some omit error and return only msg or message"
                msg = str(data.get("msg") or data.get("message") or data.get("detail") or msg)
        except (json.JSONDecodeError, UnicodeDecodeError):
            text = r.text[:200].strip()
            msg = text or msg
        err = refusal(r.status_code, code, msg)
        named = data.get("new_contract") if isinstance(data, dict) else None
        if isinstance(named, int) and not isinstance(named, bool):
            err.named_instance = named
        return err


def same_service(a: httpx.URL, b: httpx.URL) -> bool:
    """Where the CLI keeps the key across a redirect: the same scheme and port, and the same
    host or both under vast.ai ("candidate.vast.ai -> candidate-server.vast.ai")."""
    if a.scheme != b.scheme or a.port != b.port:
        return False
    return a.host == b.host or (a.host.endswith(".vast.ai") and b.host.endswith(".vast.ai"))


# What Vast says when it refuses a key, whatever the status: 401 `auth_error` "Invalid user
# key" on most endpoints, 404 with the same body on search (vast-ai/docs openapi.yaml), and 404
# "Session expired. Please log in again." (vastai 1.9.1 `vast.py` _is_tfa_session_expired).
AUTH_CODES = frozenset({"auth_error", "unauthorized", "invalid_api_key"})
AUTH_TEXTS = ("invalid user key", "session expired", "invalid api key")


def refusal(status: int, code: str, msg: str) -> ApiError:
    """A refusal by what it says, not by its status alone: a refused key is never "not found"
    (a 404 read as gone would count a destroy as done while the rental bills on)."""
    if status == 401 or code.lower() in AUTH_CODES or any(t in msg.lower() for t in AUTH_TEXTS):
        said = f": {msg[:120]}" if msg and "api key" not in msg.lower() else ""
        return AuthError(
            status if status >= 400 else 401, code, f"the marketplace rejected the API key{said}"
        )
    if status == 429 and code == "search_quota_exceeded":
        return QuotaExceeded(429, code, "daily search quota spent")
    if status == 404 or code in ("no_such_instance", "no_such_ask"):
        return NotFound(404 if status < 400 else status, code, msg)
    return ApiError(status if status >= 400 else 400, code, msg)
