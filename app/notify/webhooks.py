"""Verification of the market's signed webhooks (Vast's notification webhooks), and the signing
the simulator uses to send the same events.

Vast's contract (vast-ai/docs `guides/reference/notification-webhooks.mdx`): a JSON `POST`
with headers `X-Vast-Event-Id`, `X-Vast-Delivery-Attempt`, `X-Vast-Timestamp` (integer Unix
seconds) and `X-Vast-Signature-256` (`sha256=` + hex HMAC-SHA256 with the webhook's secret over
`<X-Vast-Timestamp>.<raw body bytes>`); a body with `event_id`, `user_id`, `notif_type` (short
slug: `outbid`, `low_credit`...), `subject`, `message`, `data` (object or null; keys vary by
type), `data_truncated`, `timestamp` (float). Delivery is at least once, with a 10 s timeout;
3xx and most 4xx are permanent failures, 408, 429 and 5xx are retried.

A verified event is evidence, not a verdict: it tells the engine which instance to look at now.
`WebhookVerifier.verify` is pure (the time is an argument); `webhook_handler` is the thin aiohttp
shell around it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
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
    MALFORMED_HEADERS: 401,
    BAD_SIGNATURE: 401,
    STALE: 401,
    MALFORMED_BODY: 400,
    REPLAYED: 200,
}


@dataclass(frozen=True)
class WebhookEvent:
    """A verified event. `instance_id` is None when its `data` names no instance."""

    event_id: str
    notif_type: str
    instance_id: int | None
    timestamp: float
    subject: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    attempt: int = 1


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
    """Checks deliveries against one shared secret; remembers accepted event ids (at most
    `replay_memory`, and none older than twice `max_age_s`: older ones are refused as stale
    anyway). Counts: `accepted`, and `refusals` by reason. Not thread-safe: one receiver owns
    it (the aiohttp handler runs on one loop)."""

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
        """How many accepted event ids are kept for the replay check."""
        return len(self._seen)

    def verify(self, headers: Mapping[str, str], body: bytes, now: float) -> WebhookEvent | Refusal:
        """The event `body` carries, when it is genuine, fresh and new; else a Refusal (counted).
        Order: size, headers, signature (over the raw bytes), age, body, replay; an event id is
        remembered only once everything else passed."""
        outcome = self._check(headers, body, now)
        if isinstance(outcome, Refusal):
            self.refusals[outcome.reason] += 1
        else:
            self.accepted += 1
        return outcome

    def _check(self, headers: Mapping[str, str], body: bytes, now: float) -> WebhookEvent | Refusal:
        if len(body) > self.max_body:
            return Refusal(TOO_LARGE, f"{len(body)} bytes, the cap is {self.max_body}")
        h = {str(k).lower(): str(v) for k, v in headers.items()}
        ts_text = h.get(TIMESTAMP_HEADER.lower(), "").strip()
        signature = h.get(SIGNATURE_HEADER.lower(), "").strip()
        if not ts_text or not signature:
            return Refusal(MISSING_HEADERS, f"needs {TIMESTAMP_HEADER} and {SIGNATURE_HEADER}")
        if not ts_text.isdigit() or len(ts_text) > 12 or not signature.startswith(SIGNATURE_PREFIX):
            return Refusal(MALFORMED_HEADERS, "timestamp or signature not in Vast's form")
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
        self._seen[event_id] = float(ts)
        while len(self._seen) > self._replay_memory:
            self._seen.popitem(last=False)
        return _event(event_id, payload, ts, h.get(ATTEMPT_HEADER.lower(), "1"))

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
    """An aiohttp `POST` handler: reads at most the cap (refusing a larger declared or actual
    body without reading it all), verifies, hands a verified event to `on_event` (which must
    only enqueue) and answers 204; refusals get the status `Refusal.status`."""

    async def handle(request: web.Request) -> web.Response:
        if request.method != "POST":
            return web.Response(status=405)
        declared = request.content_length
        if declared is not None and declared > verifier.max_body:
            refusal = Refusal(TOO_LARGE, f"declared {declared} bytes")
            verifier.refusals[refusal.reason] += 1
            return web.Response(status=refusal.status, text=refusal.reason)
        body = await request.content.read(verifier.max_body + 1)
        outcome = verifier.verify(request.headers, body, clock())
        if isinstance(outcome, Refusal):
            return web.Response(status=outcome.status, text=outcome.reason)
        on_event(outcome)
        return web.Response(status=204)

    return handle


def _parse(body: bytes) -> dict[str, Any] | None:
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


def _event(event_id: str, payload: Mapping[str, Any], ts: int, attempt_text: str) -> WebhookEvent:
    data = payload.get("data")
    data = data if isinstance(data, dict) else {}
    stamp = payload.get("timestamp")
    timestamp = (
        float(stamp)
        if isinstance(stamp, int | float) and not isinstance(stamp, bool) and math.isfinite(stamp)
        else float(ts)
    )
    attempt = int(attempt_text) if attempt_text.strip().isdigit() else 1
    return WebhookEvent(
        event_id=event_id,
        notif_type=clean(payload.get("notif_type", ""), limit=64),
        instance_id=_instance_id(data),
        timestamp=timestamp,
        subject=clean(payload.get("subject", ""), limit=200),
        data=data,
        attempt=min(attempt, 1000),
    )


def _instance_id(data: Mapping[str, Any]) -> int | None:
    """The instance an event is about; the docs leave `data`'s keys to each type, so the names
    the API uses for an instance elsewhere are tried. Anything but a positive integer is no id."""
    for key in ("instance_id", "contract_id", "instance"):
        value = data.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and 0 < value < 2**63:
            return value
        if isinstance(value, str) and value.isdigit() and 0 < int(value) < 2**63:
            return int(value)
    return None
