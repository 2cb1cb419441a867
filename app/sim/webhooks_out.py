"""The market's signed webhooks, as Vast sends them (vast-ai/docs guides/reference/
notification-webhooks.mdx): a POST per event with `X-Vast-Event-Id`, `X-Vast-Delivery-Attempt`,
`X-Vast-Timestamp` (integer Unix seconds) and `X-Vast-Signature-256` (`sha256=` + the hex
HMAC-SHA256 of `<timestamp>.<raw body>` with the webhook's secret); a body with `event_id`,
`user_id`, `notif_type`, `subject`, `message`, `timestamp`. Events here: `instance_offline` and
`instance_online` as a host drops off and comes back. Vast documents no instance id in the
body; the simulator puts it in `data.instance_id` (an assumption, docs/fidelity.md). Retries as
documented: 408, 429, 5xx, timeouts and connection errors, a few times; a 3xx or another 4xx
is final."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

import httpx

from .market import SimMarket

RETRIES = 3
TIMEOUT_S = 10.0  # Vast's documented request timeout


def signature(secret: str, body: bytes, ts: int) -> str:
    mac = hmac.new(secret.encode(), str(ts).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class WebhookSender:
    def __init__(
        self, market: SimMarket, url: str, secret: str, wall: Callable[[], float] = time.time
    ) -> None:
        self.market = market
        self.url = url
        self.secret = secret
        self.wall = wall
        self.seen: dict[int, str | None] = {}  # instance id -> its actual status last tick
        self.sent: list[dict[str, Any]] = []  # bodies delivered (2xx)
        self.failed = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def tick(self) -> None:
        now = self.market.clock.now()
        for inst in self.market.instances.values():
            if inst.destroyed_at is not None:
                self.seen.pop(inst.id, None)
                continue
            actual, _ = inst.status(now)
            before = self.seen.get(inst.id, actual)
            self.seen[inst.id] = actual
            if actual == "offline" and before != "offline":
                self._send("instance_offline", inst.id, "went offline")
            elif before == "offline" and actual != "offline":
                self._send("instance_online", inst.id, "is back online")

    def _send(self, kind: str, iid: int, what: str) -> None:
        event_id = secrets.token_hex(8)
        body = json.dumps(
            {
                "event_id": event_id,
                "user_id": 4242,
                "notif_type": kind,
                "subject": f"Instance {iid} {what}",
                "message": f"Instance {iid} {what}.",
                "timestamp": self.wall(),
                "data": {"instance_id": iid},
            }
        ).encode()
        task = asyncio.ensure_future(self._deliver(body, event_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, body: bytes, event_id: str) -> None:
        async with httpx.AsyncClient(timeout=TIMEOUT_S, follow_redirects=False) as http:
            for attempt in range(1, RETRIES + 1):
                ts = int(self.wall())
                headers = {
                    "Content-Type": "application/json",
                    "X-Vast-Event-Id": event_id,
                    "X-Vast-Delivery-Attempt": str(attempt),
                    "X-Vast-Timestamp": str(ts),
                    "X-Vast-Signature-256": signature(self.secret, body, ts),
                }
                try:
                    r = await http.post(self.url, content=body, headers=headers)
                except httpx.HTTPError:
                    await asyncio.sleep(0.2 * attempt)
                    continue
                if r.status_code < 300:
                    self.sent.append(json.loads(body))
                    return
                if r.status_code not in (408, 429) and r.status_code < 500:
                    break  # final, as Vast treats it
                await asyncio.sleep(0.2 * attempt)
        self.failed += 1

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
