"""The market's signed webhooks, as Vast sends them (notification-webhooks.mdx, docs/fidelity.md)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from .market import SimMarket
from .rental import FATAL_TEXTS, SimInstance

RETRIES = 3
TIMEOUT_S = 10.0  # Vast's documented request timeout
USER_ID = 4242
EXPIRING_S = 24 * 3600.0  # an assumption: no source gives how early "expiring" is sent
CONSOLE = "https://cloud.vast.ai/instances/"

# the other instance events: the catalog's display name per slug (the renter's enumeration of
# `GET /notification-types/`) and what each tells the renter (notifications.mdx)
EVENTS = {
    "instance_created": ("Instance created", "was created and is being set up."),
    "instance_stopped": (
        "Instance stopped",
        "was stopped. Stopped instances still incur storage charges.",
    ),
    "instance_resumed": ("Instance resumed", "got its GPU back and is running again."),
    "instance_deleted": ("Instance deleted", "was destroyed and its data removed."),
    "instance_offline": (
        "Instance offline",
        "went down because of a problem on the host machine.",
    ),
    "instance_online": ("Instance back online", "recovered after an outage."),
    "error_msgs": (
        "Instance error detected",
        "had errors detected, such as a container that failed to start.",
    ),
    "near_end_date": ("Instance expiring soon", "is nearing the end date of its rental contract."),
}
_FATAL = tuple(text.split("{")[0] for _, text in FATAL_TEXTS)


def signature(secret: str, body: bytes, ts: int) -> str:
    mac = hmac.new(secret.encode(), str(ts).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def payload(
    kind: str,
    iid: int,
    machine_id: int,
    at: float,
    *,
    image: str = "",
    bid: float | None = None,
    dph: float = 0.0,
    min_bid: float | None = None,
) -> dict[str, Any]:
    """The body of one event about instance `iid` at wall time `at`: Vast's six fields, worded as
    Vast delivered them where known (docs/fidelity.md)."""
    if kind == "outbid":
        subject = f"Your Interruptible Instance #{iid} Has Been Outbid"
        floor = f" and the current minimum bid is ${min_bid:.2f}/hr" if min_bid else ""
        message = (
            f"Your interruptible instance {iid} on machine {machine_id} has been outbid and "
            f"will be stopped. Your bid was ${bid or 0.0:.2f}/hr{floor}. Update your bid at "
            f"{CONSOLE} to keep it running."
        )
    elif kind == "instance_started":
        subject = f"Your Vast.ai Instance #{iid} Is Now Running"
        message = (
            f"Your instance {iid} running {image} on machine {machine_id} has started. You are "
            f"being charged ${dph:.3f}/hr. View it at: {CONSOLE}"
        )
    else:
        title, says = EVENTS[kind]
        subject = f"Your Vast.ai Instance #{iid}: {title}"
        message = f"Your instance {iid} on machine {machine_id} {says}"
    return {
        "event_id": secrets.token_hex(16),
        "user_id": USER_ID,
        "notif_type": kind,
        "subject": subject,
        "message": message,
        "timestamp": at,
    }


@dataclass
class _Seen:
    actual: str | None
    stops: int
    outbids: int
    resumes: int
    started: bool = False
    failed: bool = False
    expiring: bool = False


@dataclass(eq=False)
class WebhookSender:
    market: SimMarket
    url: str
    secret: str
    wall: Callable[[], float] = time.time
    seen: dict[int, _Seen] = field(default_factory=dict)
    baseline: bool = False  # the rentals before the first tick are not news
    sent: list[dict[str, Any]] = field(default_factory=list)  # bodies delivered (2xx)
    failed: int = 0
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    def tick(self) -> None:
        now = self.market.clock.now()
        self.market.market_stops(now)  # outbids, resumes and contract ends up to now
        for inst in self.market.instances.values():
            seen = self.seen.get(inst.id)
            if inst.destroyed_at is not None and now >= inst.destroyed_at:
                if self.seen.pop(inst.id, None) is not None:
                    self._send("instance_deleted", inst)
                continue
            actual, msg = inst.status(now)
            if seen is None:
                seen = _Seen(actual, len(inst.stops), len(inst.outbids), len(inst.resumes))
                self.seen[inst.id] = seen
                if not self.baseline:
                    seen.started = any(s.running_at is not None for s in inst.segments)
                    continue
                self._send("instance_created", inst)
            self._changes(inst, seen, now, actual, msg)
        self.baseline = True

    def _changes(
        self, inst: SimInstance, seen: _Seen, now: float, actual: str | None, msg: str | None
    ) -> None:
        stops, outbids, resumes = len(inst.stops), len(inst.outbids), len(inst.resumes)
        if outbids > seen.outbids:
            self._send("outbid", inst, self.market.min_bid(inst.machine, now))
        elif stops > seen.stops:
            self._send("instance_stopped", inst)
        if resumes > seen.resumes:
            self._send("instance_resumed", inst)
        seen.stops, seen.outbids, seen.resumes = stops, outbids, resumes
        if not seen.started and actual == "running":
            seen.started = True
            self._send("instance_started", inst)
        if actual == "offline" and seen.actual != "offline":
            self._send("instance_offline", inst)
        elif seen.actual == "offline" and actual != "offline":
            self._send("instance_online", inst)
        fatal = actual == "exited" or (msg is not None and msg.startswith(_FATAL))
        if fatal and not seen.failed:
            self._send("error_msgs", inst)
        seen.failed = fatal
        end = inst.machine.contract_end
        if end is not None and not seen.expiring and now < end <= now + EXPIRING_S:
            seen.expiring = True
            self._send("near_end_date", inst)
        seen.actual = actual

    def _send(self, kind: str, inst: SimInstance, min_bid: float | None = None) -> None:
        said: dict[str, Any] = {"image": inst.image, "bid": inst.bid, "dph": inst.gpu_dph}
        self._post(payload(kind, inst.id, inst.machine.id, self.wall(), min_bid=min_bid, **said))

    def _post(self, event: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self._deliver(json.dumps(event).encode(), event["event_id"]))
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
