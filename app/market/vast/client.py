"""The async marketplace client: the Vast.ai REST subset, typed results, retries that respect
the API's documented pacing, and creates that are never duplicated by a retry.

`list_instances()` pages through `/api/v1/instances/`; `list_page()` reads one page, with the
official CLI's filters, which the engine's poll plan (`app/cadence.py`) uses to ask often about
the instances that need it and seldom about the rest. The API key is held here and nowhere else; it never appears in a repr,
a log line or an exception message.

Every call has one total deadline (connect, send and the whole answer read) and a cap on the
answer's size, so a market that trickles or floods cannot hold the controller. A bad row in a
list costs that row (skipped, counted with its id in `bad_rows`), never the whole answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ...core.errors import BadRow, MalformedAnswer, RentwatchError
from ...core.models import Instance, Offer

# The market's own charges (`GET /api/v0/charges/`, as `vastai show invoices-v1 --charges`
# reads them: vastai `api/billing.py` show_invoices_v1).
CHARGES_PATH = "/api/v0/charges/"


class ApiError(RentwatchError):
    """The marketplace refused a request (4xx) or kept failing (5xx) after retries."""

    title = "marketplace error"

    def __init__(self, status: int, code: str, msg: str) -> None:
        super().__init__(f"{status} {code}: {msg}")
        self.status = status
        self.code = code
        self.msg = msg


class AuthError(ApiError):
    title = "not authorised"


class NotFound(ApiError):
    title = "not found"


class MarketUnavailable(RentwatchError):
    """Timeouts, connection errors or rate limits that outlasted every retry."""

    title = "marketplace unavailable"


class AnswerLost(MarketUnavailable):
    """A request went out and no answer came back: the market may have acted on it."""


class QuotaExceeded(ApiError):
    """The daily offer-search quota is spent (429 `search_quota_exceeded`). It resets at UTC
    midnight, so retrying only burns requests; the official client does not retry it either
    (vastai `api/client.py` is_search_quota_exceeded / retry_delay)."""

    title = "search quota exceeded"


class AnswerTooLarge(MalformedAnswer):
    """An answer larger than the client's cap: read no further, believe none of it."""


@dataclass(frozen=True)
class Acted:
    """A state change the market confirmed: when it took effect (market time), and whether the
    instance was there to change (a destroy that finds it gone is done all the same)."""

    at: float
    existed: bool = True
    answer_lost: bool = False  # dated to the send of a try whose answer never came


# told of each try of a state change as it goes out: (market time, what became of the last try)
OnTry = Callable[[float, str | None], None]


class NoApiKey(RentwatchError):
    title = "no API key"


KEY_FILES = ("~/.config/vastai/vast_api_key", "~/.vast_api_key")
RETRYABLE = frozenset({429, 500, 502, 503, 504})

# Minimum intervals between calls of a kind (seconds of market time). Vast enforces a minimum
# interval per endpoint and identity (docs: "Rate limits & errors"); list 1 s, create 4.5 s,
# destroy 3 s and 10 searches a minute are documented (VAST_API.md). For the one-instance
# calls (show, and the PUT that stops, starts or labels) no figure is published: 1 s each is
# our assumption, the list's interval, and the simulator enforces the same table.
DEFAULT_MIN_INTERVALS = {
    "list": 1.0,
    "show": 1.0,
    "manage": 1.0,
    "create": 4.5,
    "destroy": 3.0,
    "search": 6.0,
}
PAGE_SIZE = 25  # the list endpoint's documented maximum page
POLL_ATTEMPTS = 2  # tries of a list or show call made for a poll (`VastClient.polling`)
_POLLING: contextvars.ContextVar[bool] = contextvars.ContextVar("polling", default=False)
DEFAULT_TIMEOUT = 20.0  # seconds for one call, whole answer included (`--http-timeout` overrides)
MAX_ANSWER_BYTES = 32 * 1024 * 1024  # a list of 25 full rows is about 100 kB


def find_api_key(explicit: str | None = None, flag: str | None = "--api-key") -> str:
    """The key from an argument, VAST_API_KEY, or the official CLI's key file, in that order.
    `flag`: the command's option for it, named in the error (None: the command has none)."""
    if explicit:
        return explicit.strip()
    env = os.environ.get("VAST_API_KEY")
    if env:
        return env.strip()
    for name in KEY_FILES:
        path = Path(name).expanduser()
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text:
            return text
    raise NoApiKey(
        "set VAST_API_KEY"
        + (f", pass {flag}," if flag else "")
        + " or log in with the official CLI "
        "(vastai set api-key ...), which writes ~/.config/vastai/vast_api_key"
    )


@dataclass(frozen=True)
class CreateResult:
    instance_id: int
    instance_api_key: str | None
    label: str
    created_at: float | None = None  # the market's own start_date, when the answer was lost


@dataclass
class ClientStats:
    requests: int = 0
    retries: int = 0
    rate_limited: int = 0
    timeouts: int = 0
    malformed: int = 0
    bad_rows: int = 0  # instance rows skipped as unreadable (the rest of the answer kept)
    recovered_creates: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


class VastClient:
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
        # rows a list answer carried that could not be read: (instance id or None, why)
        self.bad_rows: list[tuple[int | None, str]] = []
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.min_intervals = dict(DEFAULT_MIN_INTERVALS if min_intervals is None else min_intervals)
        self._last_call: dict[str, float] = {}
        self._pace_lock = asyncio.Lock()
        self._http = httpx.AsyncClient(
            timeout=self.timeout, transport=transport, headers={"User-Agent": "rentwatch/0.1"}
        )
        self.stats = ClientStats()
        self.market_time: float | None = None  # the market's clock at the last answer
        self._market_time_at = 0.0
        self.time_scale = 1.0

    def __repr__(self) -> str:
        return f"VastClient({self.base_url!r}, api_key=<hidden>)"

    @contextlib.contextmanager
    def polling(self) -> Any:
        """The poll's own list and show calls (in this task) give up after `POLL_ATTEMPTS`
        tries: the next poll, a poll interval later, is the retry. A call that kept retrying
        with backoff would leave every rental unwatched for its whole length (seconds of
        wall time; minutes of a scaled market's)."""
        token = _POLLING.set(True)
        try:
            yield
        finally:
            _POLLING.reset(token)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> VastClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- clock ----------------------------------------------------------------------------
    def now(self) -> float:
        """Market time: the last answer's clock, advanced by local time since, scaled."""
        if self.market_time is None:
            return time.time()
        return self.market_time + (time.monotonic() - self._market_time_at) * self.time_scale

    def answered_at(self) -> float:
        """Market time of the last answer (the sim stamps it; a real market falls back to now)."""
        return self.market_time if self.market_time is not None else self.now()

    async def sync_clock(self) -> float:
        """Read the market's clock and terms; a real marketplace has none and keeps wall time."""
        try:
            r = await self._http.get(f"{self.base_url}/sim/v0/clock", timeout=self.timeout)
            if r.status_code == 200:
                data = r.json()
                self.time_scale = float(data.get("time_scale", 1.0))
                self.market_time, self._market_time_at = float(data["now"]), time.monotonic()
                self.gpu_billing = str(data.get("gpu_billing", "running"))
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass
        return self.now()

    # Vast's documented rule (GPU bills only while running); a simulator says its own at
    # sync_clock, where "created" is a what-if knob
    gpu_billing = "running"

    # -- transport ------------------------------------------------------------------------
    async def _pace(self, kind: str) -> None:
        interval = self.min_intervals.get(kind, 0.0) / max(self.time_scale, 1e-9)
        if interval <= 0:
            return
        async with self._pace_lock:
            wait = self._last_call.get(kind, 0.0) + interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last_call[kind] = time.monotonic()

    async def _back_off(self, delay: float) -> None:
        """Wait before a retry: `delay` seconds of the market's time, jittered. The same on the
        real market; on the simulator at time scale S a 1/S share of it (a backoff of seconds
        would be minutes of market time there, billed to whatever waits on the call)."""
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
        retry: bool = True,
        on_send: Callable[[], None] | None = None,
    ) -> Any:
        url = f"{self.base_url}{path}"
        attempts = self.max_attempts if retry else 1
        if _POLLING.get() and kind in ("list", "show"):
            attempts = min(attempts, POLL_ATTEMPTS)
        delay = self.backoff
        last: Exception | None = None
        for attempt in range(attempts):
            await self._pace(kind)
            if on_send is not None:
                on_send()
            self.stats.requests += 1
            self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1
            try:
                r = await asyncio.wait_for(
                    self._send(method, url, params, body), max(self.timeout, 1e-3)
                )
            except AnswerTooLarge:
                self.stats.malformed += 1
                raise
            except (httpx.TimeoutException, TimeoutError):
                self.stats.timeouts += 1
                last = AnswerLost(f"{method} {path} timed out after {self.timeout:g}s")
            except httpx.TransportError as exc:
                last = AnswerLost(f"{method} {path}: {type(exc).__name__}")
            else:
                stamp = r.headers.get("X-Market-Time")
                if stamp:
                    try:
                        self.market_time, self._market_time_at = float(stamp), time.monotonic()
                    except ValueError:
                        pass
                if r.status_code < 400:
                    try:
                        data = r.json()
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        self.stats.malformed += 1
                        last = MalformedAnswer(
                            f"{method} {path}: the answer is not JSON ({len(r.content)} bytes)"
                        )
                        if not retry or attempt + 1 == attempts:
                            raise last from None
                        continue  # every retried call is idempotent; ask again
                    if isinstance(data, dict) and data.get("success") is False:
                        # a refusal dressed as a 2xx (some endpoints answer 200 with it)
                        raise self._error(r, data)
                    return data
                if self._quota_exceeded(r):
                    self.stats.rate_limited += 1
                    raise QuotaExceeded(429, "search_quota_exceeded", "daily search quota spent")
                if r.status_code not in RETRYABLE:
                    raise self._error(r)
                if r.status_code == 429:
                    self.stats.rate_limited += 1
                last = self._error(r)
                retry_after = r.headers.get("Retry-After")
                if retry_after:
                    try:
                        delay = max(delay, min(float(retry_after), 60.0))
                    except ValueError:
                        pass
            if attempt + 1 < attempts:
                self.stats.retries += 1
                await self._back_off(delay)
                delay = min(delay * 2, 10.0)
        if not retry and last is not None:
            raise last  # a single try: the caller decides what the failure means
        if isinstance(last, MalformedAnswer | ApiError) and not (
            isinstance(last, ApiError) and last.status in RETRYABLE
        ):
            raise last
        raise MarketUnavailable(f"{method} {path} failed after {attempts} attempts: {last}")

    async def _send(
        self, method: str, url: str, params: dict[str, Any] | None, body: Any
    ) -> httpx.Response:
        """One exchange, its answer read to the end but never past `max_answer_bytes`."""
        req = self._http.build_request(
            method, url, params=params, json=body, headers={"Authorization": f"Bearer {self.__key}"}
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
    def _quota_exceeded(r: httpx.Response) -> bool:
        if r.status_code != 429:
            return False
        try:
            data = r.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return False
        return isinstance(data, dict) and data.get("error") == "search_quota_exceeded"

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
        if r.status_code == 401:
            return AuthError(401, code, "the marketplace rejected the API key")
        if r.status_code == 404 or code in ("no_such_instance", "no_such_ask"):
            return NotFound(404 if r.status_code < 400 else r.status_code, code, msg)
        return ApiError(r.status_code if r.status_code >= 400 else 400, code, msg)

    # -- offers ---------------------------------------------------------------------------
    async def search_offers(
        self,
        query: dict[str, Any],
        *,
        order: list[list[str]] | None = None,
        limit: int | None = 200,
        storage_gb: float = 10.0,
    ) -> list[Offer]:
        body: dict[str, Any] = dict(query)
        body["order"] = order or [["dph_total", "asc"]]
        body["type"] = "on-demand"
        body["allocated_storage"] = storage_gb
        if limit:
            body["limit"] = limit
        data = await self._request("POST", "/api/v0/bundles/", kind="search", body=body)
        rows = data.get("offers") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise MalformedAnswer("offer search answered without an offers list")
        out = []
        for row in rows:
            try:
                out.append(Offer.from_api(row))
            except MalformedAnswer:
                self.stats.malformed += 1  # one bad offer does not spoil the list
        return out

    # -- instances ------------------------------------------------------------------------
    async def list_instances(
        self, page_size: int = PAGE_SIZE, select_filters: dict[str, Any] | None = None
    ) -> list[Instance]:
        """Every instance of the account (or those `select_filters` picks, e.g.
        `{"label": {"in": [...]}}`), following next_token in pages of at most 25, the
        documented maximum. A row that cannot be read is skipped and noted in `bad_rows` (with
        its id when it has one); the rest of the fleet is kept."""
        out: list[Instance] = []
        token: str | None = None
        for _ in range(10_000):
            rows, token = await self.list_page(select_filters, token, page_size)
            out.extend(rows)
            if not token:
                return out
        raise MalformedAnswer("instance list never ended (next_token loops)")

    async def list_page(
        self,
        select_filters: dict[str, Any] | None = None,
        after_token: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> tuple[list[Instance], str | None]:
        """One page of the list (by id, ascending) and the token of the next (None: the last).
        The filters are the ones `vastai show instances` sends (vastai 1.9.1
        `cli/commands/instances.py` show__instances: `{"actual_status": {"in": [...]}}`,
        `{"label": {"in": [...]}}`, gpu_name, verification), so a real market serves them."""
        params: dict[str, Any] = {
            "select_filters": json.dumps(select_filters or {}),
            "order_by": json.dumps([{"col": "id", "dir": "asc"}]),
            "limit": str(max(1, min(page_size, PAGE_SIZE))),
        }
        if after_token:
            params["after_token"] = after_token
        data = await self._request("GET", "/api/v1/instances/", kind="list", params=params)
        if not isinstance(data, dict) or not isinstance(data.get("instances"), list):
            raise MalformedAnswer("instance list answered without an instances list")
        out: list[Instance] = []
        for row in data["instances"]:
            try:
                out.append(Instance.from_api(row))
            except MalformedAnswer as exc:
                self._bad_row(row, exc)
        token = data.get("next_token")
        return out, (str(token) if token else None)

    def _bad_row(self, row: Any, exc: MalformedAnswer) -> None:
        self.stats.malformed += 1
        self.stats.bad_rows += 1
        rid = row.get("id") if isinstance(row, dict) else None
        iid = rid if isinstance(rid, int) and not isinstance(rid, bool) else None
        self.bad_rows.append((iid, str(exc)[:200]))
        del self.bad_rows[:-1000]  # the latest thousand are plenty to explain a poll

    async def show_instance(self, instance_id: int) -> Instance | None:
        data = await self._request(
            "GET", f"/api/v0/instances/{int(instance_id)}/", kind="show", params={"owner": "me"}
        )
        if not isinstance(data, dict) or "instances" not in data:
            raise MalformedAnswer("show instance answered without an instances field")
        row = data["instances"]
        if row is None:
            return None
        try:
            return Instance.from_api(row)
        except MalformedAnswer as exc:  # it exists; this row of it cannot be read
            raise BadRow(int(instance_id), str(exc)[:200]) from None

    async def create_instance(
        self,
        offer_id: int,
        *,
        image: str,
        disk_gb: float,
        label: str | None = None,
        env: dict[str, str] | None = None,
        onstart: str | None = None,
        exact_label: bool = False,
    ) -> CreateResult:
        """Rent an offer. The label carries a unique tag, so after an answer that got lost
        (timeout, 5xx, garbled body) the instance list tells whether the create happened; it is
        retried only when it did not."""
        if not (exact_label and label):
            tag = f"rw-{secrets.token_hex(5)}"
            label = f"{label}:{tag}" if label else tag
        body = {
            "client_id": "me",
            "image": image,
            "disk": disk_gb,
            "label": label,
            "env": env or {},
            "onstart": onstart,
            # direct and proxy SSH, as the CLI asks with --ssh --direct (vastai
            # `api/instances.py` resolve_runtype) and SkyPilot does; plain "ssh" is proxy-only
            "runtype": "ssh_direc ssh_proxy",
            "price": None,
            "cancel_unavail": True,
        }
        for _ in range(self.max_attempts):
            try:
                data = await self._request(
                    "PUT", f"/api/v0/asks/{int(offer_id)}/", kind="create", body=body, retry=False
                )
            except (MarketUnavailable, MalformedAnswer) as exc:
                found = await self._find_label(label)
                if found is not None:
                    self.stats.recovered_creates += 1
                    return CreateResult(found.id, None, label, found.start_date)
                if isinstance(exc, MalformedAnswer):
                    raise
                await self._back_off(self.backoff)
                continue
            except ApiError as exc:
                if exc.status < 500 and exc.status != 429:
                    raise
                found = await self._find_label(label)
                if found is not None:
                    self.stats.recovered_creates += 1
                    return CreateResult(found.id, None, label, found.start_date)
                await self._back_off(self.backoff)
                continue
            if (
                not isinstance(data, dict)
                or not data.get("success")
                or data.get("new_contract") is None
            ):
                raise MalformedAnswer(f"create answered without new_contract: {str(data)[:120]}")
            try:
                iid = int(data["new_contract"])
            except (TypeError, ValueError):
                raise MalformedAnswer("create answered with a non-integer new_contract") from None
            key = data.get("instance_api_key")
            return CreateResult(iid, key if isinstance(key, str) else None, label)
        raise MarketUnavailable(
            f"create on offer {offer_id} failed after {self.max_attempts} attempts"
        )

    async def _find_label(self, label: str) -> Instance | None:
        for _ in range(self.max_attempts):
            try:
                for inst in await self.list_instances():
                    if inst.label == label:
                        return inst
                return None
            except (MarketUnavailable, MalformedAnswer):
                await self._back_off(self.backoff)
        raise MarketUnavailable("could not tell whether a create happened: the list keeps failing")

    async def _act(
        self, method: str, path: str, body: dict[str, Any], kind: str, on_try: OnTry | None
    ) -> Acted:
        """Say a state change until the market confirms it, and work out when it took effect.

        A garbled 2xx answer means the market acted (its clock header still reads). An answer
        lost to a timeout may hide an action that did happen: when a later try confirms the
        change (or a destroy finds the instance already gone), the change is dated to when the
        first unanswered try was sent, since a market acts on a request as it arrives. So the
        ledger bills what the market bills even when answers are lost.

        `on_try(sent_at, previous)` is told of each try as it goes out, with what became of the
        try before it ("refused" or "lost"): written down, it dates the change even when this
        process dies before the answer comes (see Supervisor.reconcile).
        """
        first_unanswered: float | None = None
        previous: str | None = None
        delay = self.backoff
        sent_at = self.now()

        def going() -> None:  # called after pacing, as the request leaves
            nonlocal sent_at
            sent_at = self.now()
            if on_try is not None:
                on_try(sent_at, previous)

        for _ in range(self.max_attempts):
            try:
                await self._request(method, path, kind=kind, body=body, retry=False, on_send=going)
                return self._acted(first_unanswered)
            except MalformedAnswer:
                return self._acted(first_unanswered)
            except NotFound:
                if first_unanswered is not None:
                    return self._acted(first_unanswered)  # our own lost try did it
                if method != "DELETE":
                    raise
                return Acted(self.answered_at(), existed=False)
            except AnswerLost:
                previous = "lost"
                if first_unanswered is None:
                    first_unanswered = sent_at
            except ApiError as exc:
                if exc.status not in RETRYABLE:
                    raise
                previous = "refused"
            self.stats.retries += 1
            await self._back_off(delay)
            delay = min(delay * 2, 10.0)
        raise MarketUnavailable(
            f"{method} {path}: no confirmed answer after {self.max_attempts} tries"
        )

    def _acted(self, first_unanswered: float | None) -> Acted:
        if first_unanswered is None:
            return Acted(self.answered_at())
        return Acted(first_unanswered, answer_lost=True)

    def _instance_path(self, instance_id: int) -> str:
        return f"/api/v0/instances/{int(instance_id)}/"

    async def stop_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        return await self._act(
            "PUT", self._instance_path(instance_id), {"state": "stopped"}, "manage", on_try
        )

    async def start_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        return await self._act(
            "PUT", self._instance_path(instance_id), {"state": "running"}, "manage", on_try
        )

    async def label_instance(self, instance_id: int, label: str) -> None:
        await self._act("PUT", self._instance_path(instance_id), {"label": label}, "manage", None)

    async def destroy_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        """Destroy; `existed` is False when it was already gone (which counts as done)."""
        return await self._act("DELETE", self._instance_path(instance_id), {}, "destroy", on_try)

    async def request_logs(self, instance_id: int, tail: int = 200) -> str:
        data = await self._request(
            "PUT", f"/api/v0/instances/request_logs/{int(instance_id)}/", body={"tail": str(tail)}
        )
        url = data.get("result_url") if isinstance(data, dict) else None
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise MalformedAnswer("log request answered without a result_url")
        for _ in range(30):
            try:
                r = await self._http.get(url, timeout=self.timeout)
                if r.status_code == 200:
                    return r.text[:1_000_000]
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.3)
        raise MarketUnavailable(f"logs of {instance_id} were not ready in time")

    async def charges(
        self, start: float, end: float, *, page_size: int = 100
    ) -> list[dict[str, Any]]:
        """The market's own instance charges between two epoch times, every page: the rows
        `vastai show invoices-v1 --charges -ct instance` reads (`type`, `source` such as
        "instance-1234", `amount` in USD, `start`, `end`, sub-`items`)."""
        params: dict[str, Any] = {
            "select_filters": json.dumps(
                {"day": {"gte": int(start), "lte": int(end) + 1}, "type": {"in": ["instance"]}}
            ),
            "latest_first": "false",
            "limit": str(max(1, min(page_size, 100))),
            "format": "table",
        }
        out: list[dict[str, Any]] = []
        for _ in range(10_000):
            data = await self._request("GET", CHARGES_PATH, kind="show", params=params)
            rows = data.get("results") if isinstance(data, dict) else None
            if not isinstance(rows, list):
                raise MalformedAnswer("charges answered without a results list")
            out.extend(r for r in rows if isinstance(r, dict))
            token = data.get("next_token")
            if not token:
                return out
            params["after_token"] = str(token)
        raise MalformedAnswer("charges never ended (next_token loops)")

    async def ssh_keys(self) -> list[dict[str, Any]]:
        try:
            data = await self._request("GET", "/api/v0/ssh/")
        except NotFound:
            return []  # a brand-new account may answer 404 until its first key
        if not isinstance(data, list):
            raise MalformedAnswer("ssh key list is not a list")
        return [k for k in data if isinstance(k, dict)]

    async def add_ssh_key(self, public_key: str) -> None:
        keys = await self.ssh_keys()
        if any(str(k.get("key", "")).split()[1:2] == public_key.split()[1:2] for k in keys):
            return
        await self._request("POST", "/api/v0/ssh/", body={"ssh_key": public_key})
