"""The market's signed webhooks: a genuine one is accepted with the instances its text names;
forged, replayed, stale, oversized and malformed ones are refused and counted; the aiohttp
receiver answers as Vast's retry rules expect, reads a body whole, and remembers an event only
once its request succeeded."""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from rentwatch.notify import webhooks as wh
from rentwatch.notify.webhooks import (
    Refusal,
    WebhookEvent,
    WebhookVerifier,
    sign,
    signed_headers,
)

SECRET = "whsec_test_0123456789"
NOW = 1772490000.0


def body(
    event_id: str = "7e9a2c4e",
    notif_type: str = "outbid",
    subject: str = "Your Interruptible Instance #1001 Has Been Outbid",
    message: str = "Your interruptible instance 1001 on machine 46110 has been outbid.",
    **more: object,
) -> bytes:
    """Vast's payload: its six fields, no instance field (the words as Vast sent them)."""
    return json.dumps(
        {
            "event_id": event_id,
            "user_id": 123,
            "notif_type": notif_type,
            "subject": subject,
            "message": message,
            "timestamp": NOW - 1.5,
            **more,
        }
    ).encode()


def taken(v: WebhookVerifier, headers: dict, raw: bytes, now: float = NOW) -> WebhookEvent:
    """Verified, and its request answered 2xx (what the handler does)."""
    event = v.verify(headers, raw, now)
    assert isinstance(event, WebhookEvent), event
    v.taken(event, now)
    return event


def delivery(raw: bytes, ts: float = NOW, event_id: str = "7e9a2c4e", secret: str = SECRET):
    return signed_headers(secret, raw, int(ts), event_id), raw


def test_sign_matches_vasts_documented_scheme() -> None:
    import hashlib
    import hmac

    raw = b'{"a":1}'
    expected = hmac.new(SECRET.encode(), b"1772490000." + raw, hashlib.sha256).hexdigest()
    assert sign(SECRET, raw, 1772490000) == "sha256=" + expected
    headers = signed_headers(SECRET, raw, 1772490000, "ev1", attempt=2)
    assert headers["X-Vast-Signature-256"] == "sha256=" + expected
    assert headers["X-Vast-Timestamp"] == "1772490000"
    assert headers["X-Vast-Event-Id"] == "ev1" and headers["X-Vast-Delivery-Attempt"] == "2"


def test_genuine_is_accepted_with_the_instance_its_text_names() -> None:
    v = WebhookVerifier(SECRET)
    headers, raw = delivery(body())
    event = taken(v, headers, raw, NOW + 10)
    assert (event.event_id, event.notif_type, event.named) == ("7e9a2c4e", "outbid", (1001,))
    assert event.timestamp == NOW - 1.5 and event.attempt == 1
    assert v.accepted == 1 and not v.refusals


def test_header_names_are_case_insensitive() -> None:
    headers, raw = delivery(body())
    lower = {k.lower(): v for k, v in headers.items()}
    assert isinstance(WebhookVerifier(SECRET).verify(lower, raw, NOW), WebhookEvent)


@pytest.mark.parametrize(
    "subject, message, named",
    [
        ("Your Vast.ai Instance #48927380 Is Now Running", "", (48927380,)),
        ("", "Your instance 48927380 running img on machine 46110 has started.", (48927380,)),
        ("Instance #5 and instance 7", "instance 5 again", (5, 7)),
        ("Warning - Your Vast.ai Credit Balance Is Getting Low", "below your threshold", ()),
        ("machine 46110 is offline", "instances 12 and more", ()),
        ("Instance #0", "instance 99999999999999999999", ()),
        ("Instance #1²", "instance ١٢٣", ()),
    ],
)
def test_instances_are_read_from_the_words_defensively(
    subject: str, message: str, named: tuple[int, ...]
) -> None:
    headers, raw = delivery(body(subject=subject, message=message))
    event = WebhookVerifier(SECRET).verify(headers, raw, NOW)
    assert isinstance(event, WebhookEvent) and event.named == named


def test_an_undocumented_data_field_names_nothing() -> None:
    """`data`'s keys are not documented: an id there is not believed, only the words are."""
    raw = body(subject="Low balance", message="below threshold", data={"instance_id": 5})
    headers, _ = delivery(raw)
    event = WebhookVerifier(SECRET).verify(headers, raw, NOW)
    assert isinstance(event, WebhookEvent) and event.named == ()


def refused(v: WebhookVerifier, headers: dict, raw: bytes, now: float = NOW) -> str:
    outcome = v.verify(headers, raw, now)
    assert isinstance(outcome, Refusal), outcome
    return outcome.reason


def test_forged_is_refused() -> None:
    v = WebhookVerifier(SECRET)
    headers, raw = delivery(body(), secret="not-the-secret")
    assert refused(v, headers, raw) == wh.BAD_SIGNATURE
    headers, raw = delivery(body())
    tampered = raw.replace(b"1001", b"1002")
    assert refused(v, headers, tampered) == wh.BAD_SIGNATURE
    # the timestamp is signed: moving it forward to look fresh breaks the signature
    headers, raw = delivery(body(), ts=NOW - 3600)
    assert refused(v, headers | {"X-Vast-Timestamp": str(int(NOW))}, raw) == wh.BAD_SIGNATURE
    assert v.refusals[wh.BAD_SIGNATURE] == 3 and v.accepted == 0


def test_replay_is_refused_and_counted() -> None:
    v = WebhookVerifier(SECRET)
    headers, raw = delivery(body())
    taken(v, headers, raw)
    assert refused(v, headers, raw, NOW + 5) == wh.REPLAYED
    # a retry from Vast is the same event id with a fresh signature: still not news twice
    retry = signed_headers(SECRET, raw, int(NOW + 30), "7e9a2c4e", attempt=2)
    assert refused(v, retry, raw, NOW + 30) == wh.REPLAYED
    assert v.refusals[wh.REPLAYED] == 2 and v.accepted == 1
    assert Refusal(wh.REPLAYED).status == 200  # answered 2xx: Vast stops retrying


@pytest.mark.parametrize("offset", [301.0, -301.0, 86400.0])
def test_stale_or_future_is_refused(offset: float) -> None:
    v = WebhookVerifier(SECRET)
    headers, raw = delivery(body(), ts=NOW - offset)
    assert refused(v, headers, raw) == wh.STALE
    assert v.refusals[wh.STALE] == 1


def test_oversized_is_refused_before_anything_else() -> None:
    v = WebhookVerifier(SECRET, max_body=1024)
    raw = body(instance_id=1, pad="x" * 2000)
    headers, _ = delivery(raw)
    assert refused(v, headers, raw) == wh.TOO_LARGE
    assert refused(v, {}, b"x" * 1025) == wh.TOO_LARGE
    assert v.refusals[wh.TOO_LARGE] == 2


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"X-Vast-Signature-256": None}, wh.MISSING_HEADERS),
        ({"X-Vast-Timestamp": None}, wh.MISSING_HEADERS),
        ({"X-Vast-Timestamp": "17724.5"}, wh.MALFORMED_HEADERS),
        ({"X-Vast-Timestamp": "9" * 40}, wh.MALFORMED_HEADERS),
        ({"X-Vast-Signature-256": "md5=abc"}, wh.MALFORMED_HEADERS),
        ({"X-Vast-Timestamp": "²"}, wh.MALFORMED_HEADERS),
        ({"X-Vast-Timestamp": "١٧٧٢٤٩٠٠٠٠"}, wh.MALFORMED_HEADERS),
        ({"X-Vast-Delivery-Attempt": "²"}, wh.MALFORMED_HEADERS),
        ({"X-Vast-Delivery-Attempt": "1" * 40}, wh.MALFORMED_HEADERS),
        ({"X-Vast-Event-Id": "someone-else"}, wh.MALFORMED_BODY),
    ],
)
def test_bad_headers_are_refused(change: dict, reason: str) -> None:
    headers, raw = delivery(body())
    for k, val in change.items():
        if val is None:
            headers.pop(k)
        else:
            headers[k] = val
    assert refused(WebhookVerifier(SECRET), headers, raw) == reason


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b"\xff\xfe", b'{"no_id": 1}'])
def test_genuine_but_malformed_body_is_refused(raw: bytes) -> None:
    headers = signed_headers(SECRET, raw, int(NOW), "")
    headers.pop("X-Vast-Event-Id")
    assert refused(WebhookVerifier(SECRET), headers, raw) == wh.MALFORMED_BODY


def test_replay_memory_is_bounded() -> None:
    v = WebhookVerifier(SECRET, replay_memory=3)
    for i in range(10):
        headers, raw = delivery(body(event_id=f"ev{i}"), event_id=f"ev{i}")
        taken(v, headers, raw)
    assert v.remembered == 3
    # ids older than twice the window are forgotten: they could only come back stale
    headers, raw = delivery(body(event_id="late"), ts=NOW + 700, event_id="late")
    taken(v, headers, raw, NOW + 700)
    assert v.remembered == 1


def test_a_secret_is_required() -> None:
    with pytest.raises(ValueError):
        WebhookVerifier("")


async def test_receiver_over_http() -> None:
    v = WebhookVerifier(SECRET, max_body=4096)
    seen: list[WebhookEvent] = []
    app = web.Application()
    app.router.add_post("/vast/webhook", wh.webhook_handler(v, seen.append, clock=lambda: NOW))
    async with TestClient(TestServer(app)) as client:
        headers, raw = delivery(body())
        resp = await client.post("/vast/webhook", data=raw, headers=headers)
        assert resp.status == 204
        resp = await client.post("/vast/webhook", data=raw, headers=headers)
        assert resp.status == 200  # a replay: taken once, acknowledged, not acted on again
        forged, _ = delivery(body(), secret="wrong")
        forged["X-Vast-Event-Id"] = "7e9a2c4e"
        resp = await client.post("/vast/webhook", data=raw, headers=forged)
        assert resp.status == 401
        resp = await client.post("/vast/webhook", data=b"x" * 5000, headers=headers)
        assert resp.status == 413
    assert [e.named for e in seen] == [(1001,)]
    assert v.accepted == 1
    assert dict(v.refusals) == {wh.REPLAYED: 1, wh.BAD_SIGNATURE: 1, wh.TOO_LARGE: 1}


async def test_a_malformed_header_is_400_and_its_retry_is_taken() -> None:
    """[Y 11, 14] '²' passes str.isdigit() and fails int(): a 400 (never a 500), and nothing
    remembered, so Vast's retry of the same event is taken, not answered "replayed"."""
    v = WebhookVerifier(SECRET)
    seen: list[WebhookEvent] = []
    app = web.Application()
    app.router.add_post("/hook", wh.webhook_handler(v, seen.append, clock=lambda: NOW))
    async with TestClient(TestServer(app)) as client:
        headers, raw = delivery(body())
        for name in ("X-Vast-Delivery-Attempt", "X-Vast-Timestamp"):
            resp = await client.post("/hook", data=raw, headers=headers | {name: "²"})
            assert resp.status == 400, name
        retry = signed_headers(SECRET, raw, int(NOW), "7e9a2c4e", attempt=2)
        assert (await client.post("/hook", data=raw, headers=retry)).status == 204
    assert [e.attempt for e in seen] == [2] and v.accepted == 1


async def test_an_event_whose_handing_on_failed_is_taken_on_retry() -> None:
    """[Y 14] The event id is remembered only after the request fully succeeded: a 500 leaves
    it unremembered, and the retry is acted on."""
    v = WebhookVerifier(SECRET)
    seen: list[WebhookEvent] = []

    def on_event(event: WebhookEvent) -> None:
        if not seen:
            seen.append(event)
            raise RuntimeError("the engine could not take it")
        seen.append(event)

    async def guard(request: web.Request) -> web.StreamResponse:
        try:
            return await wh.webhook_handler(v, on_event, clock=lambda: NOW)(request)
        except RuntimeError:
            return web.Response(status=500)

    app = web.Application()
    app.router.add_post("/hook", guard)
    async with TestClient(TestServer(app)) as client:
        headers, raw = delivery(body())
        assert (await client.post("/hook", data=raw, headers=headers)).status == 500
        assert v.remembered == 0
        assert (await client.post("/hook", data=raw, headers=headers)).status == 204
        assert (await client.post("/hook", data=raw, headers=headers)).status == 200
    assert len(seen) == 2 and v.accepted == 1 and v.refusals[wh.REPLAYED] == 1


async def test_a_body_in_two_segments_is_read_whole() -> None:
    """[Y 13] `content.read(n)` returns what has arrived so far: a genuine body sent in two
    TCP segments, a moment apart, is still verified whole (not refused 401, which Vast takes
    as permanent)."""
    import asyncio

    v = WebhookVerifier(SECRET)
    seen: list[WebhookEvent] = []
    app = web.Application()
    app.router.add_post("/hook", wh.webhook_handler(v, seen.append, clock=lambda: NOW))
    server = TestServer(app)
    await server.start_server()
    try:
        headers, raw = delivery(body())
        head = "".join(f"{k}: {val}\r\n" for k, val in headers.items())
        request = (
            f"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: {len(raw)}\r\n{head}"
            "Connection: close\r\n\r\n"
        ).encode()
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(request + raw[:40])
        await writer.drain()
        await asyncio.sleep(0.3)  # the handler is reading by now, with part of the body
        writer.write(raw[40:])
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        writer.close()
        assert status_line.split()[1] == b"204", status_line
    finally:
        await server.close()
    assert [e.named for e in seen] == [(1001,)]
