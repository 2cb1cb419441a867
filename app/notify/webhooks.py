"""Verification of the market's signed webhooks, and their signing (`signed_headers`, for tests).

Vast's contract (vast-ai/docs `notification-webhooks.mdx`): `X-Vast-Signature-256` is `sha256=` +
hex HMAC-SHA256 over `<X-Vast-Timestamp>.<raw body>`; the body names no instance in a field, only
in its text ("Your Interruptible Instance #48926820 Has Been Outbid", observed;
docs/fidelity.md). Delivery is at least once. A verified event is a reason to poll now, never a
verdict. `verify` is pure and remembers nothing; `taken` remembers an id once its request
succeeded, so Vast's retry of a failed delivery is not answered "replayed"."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import re
from collections import Counter, OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from ..core.text import clean

EVENT_ID_HEADER: Final = "X-Vast-Event-Id"
ATTEMPT_HEADER: Final = "X-Vast-Delivery-Attempt"
TIMESTAMP_HEADER: Final = "X-Vast-Timestamp"
SIGNATURE_HEADER: Final = "X-Vast-Signature-256"
SIGNATURE_PREFIX: Final = "sha256="

MAX_AGE_S: Final = 300.0
MAX_BODY: Final = 64 * 1024  # Vast caps `data` at 4096 bytes; the rest of a body is small
REPLAY_MEMORY: Final = 10_000
_ID_LIMIT: Final = 128
_TEXT_LIMIT: Final = 1000  # subject and message, as kept and searched for instance numbers
# an instance named in an event's text: "Instance #48927380", "instance 48927380 on machine"
_NAMED = re.compile(r"\binstance\s+#?([0-9]{1,15})\b", re.IGNORECASE)
_MAX_NAMED: Final = 8

# refusal reasons, as counted
TOO_LARGE: Final = "too_large"
MISSING_HEADERS: Final = "missing_headers"
MALFORMED_HEADERS: Final = "malformed_headers"
BAD_SIGNATURE: Final = "bad_signature"
STALE: Final = "stale"
MALFORMED_BODY: Final = "malformed_body"
REPLAYED: Final = "replayed"

# the answer the receiver gives for each refusal: a replay is a retry of what was already
# taken (2xx stops further retries); the rest are permanent 4xx, none of them retryable
STATUS_FOR: Final[Mapping[str, int]] = {
    TOO_LARGE: 413,
    MISSING_HEADERS: 401,
    MALFORMED_HEADERS: 400,
    BAD_SIGNATURE: 401,
    STALE: 401,
    MALFORMED_BODY: 400,
    REPLAYED: 200,
}


@dataclass(frozen=True)
class WebhookEvent:
    """A verified event. `named`: the instance numbers its subject or message names (none for
    an account event such as low credit), in the order they appear."""

    event_id: str
    notif_type: str
    timestamp: float
    subject: str = ""
    message: str = ""
    named: tuple[int, ...] = field(default_factory=tuple)
    attempt: int = 1
    signed_at: float = 0.0  # its X-Vast-Timestamp: how long its id is worth remembering


@dataclass(frozen=True)
class Refusal:
    """A request that is not (or no longer) evidence, and why."""

    reason: str
    detail: str = ""

    @property
    def status(self) -> int:
        return STATUS_FOR.get(self.reason, 400)


def sign(secret: str | bytes, body: bytes, ts: int) -> str:
    """The `X-Vast-Signature-256` value for `body` sent at `ts` (integer Unix seconds)."""
    key = secret.encode() if isinstance(secret, str) else secret
    digest = hmac.new(key, str(int(ts)).encode() + b"." + body, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def signed_headers(
    secret: str | bytes, body: bytes, ts: int, event_id: str, attempt: int = 1
) -> dict[str, str]:
    """Every header a genuine delivery carries, for the simulator and tests."""
    return {
        "Content-Type": "application/json",
        EVENT_ID_HEADER: event_id,
        ATTEMPT_HEADER: str(attempt),
        TIMESTAMP_HEADER: str(int(ts)),
        SIGNATURE_HEADER: sign(secret, body, ts),
    }


class WebhookVerifier:
    """Checks deliveries against one shared secret; remembers at most `replay_memory` taken ids,
    none older than twice `max_age_s`. Counts `accepted` and `refusals` by reason. One receiver
    owns it (not thread-safe)."""

    def __init__(
        self,
        secret: str | bytes,
        *,
        max_age_s: float = MAX_AGE_S,
        max_body: int = MAX_BODY,
        replay_memory: int = REPLAY_MEMORY,
    ) -> None:
        if not secret:
            raise ValueError("a webhook secret is required")
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self.max_age_s = max_age_s
        self.max_body = max_body
        self._replay_memory = replay_memory
        self._seen: OrderedDict[str, float] = OrderedDict()
        self.accepted = 0
        self.refusals: Counter[str] = Counter()

    @property
    def remembered(self) -> int:
        """How many taken event ids are kept for the replay check."""
        return len(self._seen)

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> WebhookEvent | Refusal:
        """The event `body` carries, when genuine, fresh and not taken; else a Refusal (counted).
        Order: size, headers, signature over the raw bytes, age, body, replay."""
        outcome = self._check(headers, body, now)
        if isinstance(outcome, Refusal):
            self.refusals[outcome.reason] += 1
        return outcome

    def taken(self, event: WebhookEvent, now: float) -> None:
        """`event` was handed on and its request is answered 2xx: a retry of it is a replay."""
        self.accepted += 1
        self._forget(now)
        self._seen[event.event_id] = event.signed_at
        while len(self._seen) > self._replay_memory:
            self._seen.popitem(last=False)

    def _check(self, headers: Mapping[str, str], body: bytes, now: float) -> WebhookEvent | Refusal:
        if len(body) > self.max_body:
            return Refusal(TOO_LARGE, f"{len(body)} bytes, the cap is {self.max_body}")
        h = {str(k).lower(): str(v) for k, v in headers.items()}
        ts_text = h.get(TIMESTAMP_HEADER.lower(), "").strip()
        signature = h.get(SIGNATURE_HEADER.lower(), "").strip()
        attempt_text = h.get(ATTEMPT_HEADER.lower(), "1").strip()
        if not ts_text or not signature:
            return Refusal(MISSING_HEADERS, f"needs {TIMESTAMP_HEADER} and {SIGNATURE_HEADER}")
        # ASCII digits only: '²' passes str.isdigit() and fails int()
        if (
            not _digits(ts_text, 12)
            or not _digits(attempt_text, 6)
            or not signature.startswith(SIGNATURE_PREFIX)
        ):
            return Refusal(MALFORMED_HEADERS, "a header is not in Vast's form")
        ts = int(ts_text)
        if not hmac.compare_digest(signature.encode(), sign(self._secret, body, ts).encode()):
            return Refusal(BAD_SIGNATURE)
        if abs(now - ts) > self.max_age_s:
            return Refusal(
                STALE, f"signed {now - ts:.0f}s from now, the window is {self.max_age_s:.0f}s"
            )
        payload = _parse(body)
        if payload is None:
            return Refusal(MALFORMED_BODY, "not a JSON object")
        header_id = h.get(EVENT_ID_HEADER.lower(), "").strip()
        body_id = payload.get("event_id")
        event_id = body_id if isinstance(body_id, str) and body_id else header_id
        if not event_id or len(event_id) > _ID_LIMIT or (header_id and header_id != event_id):
            return Refusal(MALFORMED_BODY, "no event_id, or one that disagrees with its header")
        self._forget(now)
        if event_id in self._seen:
            return Refusal(REPLAYED, clean(event_id, limit=40))
        return _event(event_id, payload, ts, int(attempt_text))

    def _forget(self, now: float) -> None:
        horizon = now - 2 * self.max_age_s
        while self._seen:
            oldest = next(iter(self._seen.values()))
            if oldest >= horizon:
                break
            self._seen.popitem(last=False)


def webhook_handler(
    verifier: WebhookVerifier,
    on_event: Callable[[WebhookEvent], None],
    clock: Callable[[], float],
) -> Callable[[web.Request], Coroutine[Any, Any, web.Response]]:
    """An aiohttp `POST` handler: the body read up to the cap, verified, handed to `on_event` (which
    must only enqueue), answered 204, and only then its id remembered, so an `on_event` that
    raises leaves Vast's retry of the 500 to be taken."""

    async def handle(request: web.Request) -> web.Response:
        # one byte past the cap is enough for `verify` to refuse it, whatever its length says
        body = await read_capped(request, verifier.max_body + 1)
        now = clock()
        outcome = verifier.verify(request.headers, body, now)
        if isinstance(outcome, Refusal):
            return web.Response(status=outcome.status, text=outcome.reason)
        on_event(outcome)
        verifier.taken(outcome, now)
        return web.Response(status=204)

    return handle


async def read_capped(request: web.Request, cap: int) -> bytes:
    """The body up to `cap` bytes, however many segments it came in (`read(n)` alone may not)."""
    try:
        return await request.content.readexactly(cap)
    except asyncio.IncompleteReadError as exc:  # the whole body, shorter than the cap
        return exc.partial


def named_instances(*texts: str) -> tuple[int, ...]:
    """The instance numbers `texts` name ("Instance #48927380", "instance 48927380"), first
    seen first, at most a few; a number too large to be an id is none."""
    out: list[int] = []
    for text in texts:
        for m in _NAMED.finditer(text):
            iid = int(m.group(1))
            if 0 < iid < 2**63 and iid not in out:
                out.append(iid)
    return tuple(out[:_MAX_NAMED])


def _digits(text: str, most: int) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= most


def _parse(body: bytes) -> dict[str, Any] | None:
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


def _event(event_id: str, payload: Mapping[str, Any], ts: int, attempt: int) -> WebhookEvent:
    stamp = payload.get("timestamp")
    timestamp = (
        float(stamp)
        if isinstance(stamp, int | float) and not isinstance(stamp, bool) and math.isfinite(stamp)
        else float(ts)
    )
    subject = clean(payload.get("subject", ""), limit=_TEXT_LIMIT)
    message = clean(payload.get("message", ""), limit=_TEXT_LIMIT)
    return WebhookEvent(
        event_id=event_id,
        notif_type=clean(payload.get("notif_type", ""), limit=64),
        timestamp=timestamp,
        subject=subject,
        message=message,
        named=named_instances(subject, message),
        attempt=min(attempt, 1000),
        signed_at=float(ts),
    )
