"""[T] The controller's TCP listener also serves `/metrics` behind its token, and Vast's signed
webhooks: a forged, replayed or oversized one is refused and counted; a genuine one asks for a
poll now, with the instance its words name asked about ([AC] 1). [Y 9, 11] A connection counts
as valid only once a webhook's signature checks; a request that fails writes one traceback a
burst, not one each."""

from __future__ import annotations

import json
import time

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from rentwatch.notify.metrics import Metrics
from rentwatch.notify.webhooks import signed_headers
from rentwatch.run.service.server import WEBHOOK_PATH, ServiceServer, routes

SECRET = "whsec-test"


def _event(iid: int, event_id: str) -> bytes:
    return json.dumps(
        {
            "event_id": event_id,
            "user_id": 1,
            "notif_type": "instance_offline",
            "subject": f"Your Vast.ai Instance #{iid}: Instance offline",
            "message": f"Your instance {iid} went down because of a problem on the host machine.",
            "timestamp": time.time(),
        }
    ).encode()


def _look(looked: list[tuple[int, ...]]):
    def look(named: tuple[int, ...]) -> list[int]:
        looked.append(named)
        return list(named)

    return look


async def test_metrics_need_the_token_and_webhooks_their_signature():
    looked: list[tuple[int, ...]] = []
    metrics = Metrics()
    metrics.update("c", {"verified": 2}, 1.25, 4, 1, {"done": 1}, 0.1)
    extra, open_paths, verifier = routes(metrics, _look(looked), secret=SECRET)
    server = ServiceServer(object(), extra, open_paths)  # type: ignore[arg-type]
    server._token = "tok"
    async with TestClient(TestServer(server.app())) as client:
        assert (await client.get("/metrics")).status == 401
        r = await client.get("/metrics", headers={"Authorization": "Bearer tok"})
        names = {f.name for f in text_string_to_metric_families(await r.text())}
        assert r.status == 200 and "rentwatch_instances" in names
        now = int(time.time())
        body = _event(6056, "ev-1")
        good = signed_headers(SECRET, body, now, "ev-1")
        forged = signed_headers("not-the-secret", body, now, "ev-1")
        assert (await client.post(WEBHOOK_PATH, data=body, headers=forged)).status == 401
        assert looked == []
        assert (await client.post(WEBHOOK_PATH, data=body, headers=good)).status == 204
        assert looked == [(6056,)]
        again = await client.post(WEBHOOK_PATH, data=body, headers=good)
        assert again.status < 300 and looked == [(6056,)]  # a replay is not news
        stale = signed_headers(SECRET, _event(7, "ev-2"), now - 3600, "ev-2")
        assert (
            await client.post(WEBHOOK_PATH, data=_event(7, "ev-2"), headers=stale)
        ).status >= 400
        big = b"x" * (verifier.max_body + 10)
        assert (
            await client.post(
                WEBHOOK_PATH, data=big, headers=signed_headers(SECRET, big, now, "ev-3")
            )
        ).status == 413
        assert sum(verifier.refusals.values()) >= 4 and looked == [(6056,)]


def test_the_simulator_sends_signed_events_our_receiver_accepts(make_sim):
    """The simulated market signs its webhooks as Vast does, with Vast's payload (six fields,
    no instance field); rentwatch's receiver verifies them and reads the instance from the
    words: created, started, then offline, each asking for a look at it."""
    import asyncio
    import threading

    from aiohttp import web
    from rentwatch.market.vast.client import VastClient

    looked: list[tuple[int, ...]] = []
    extra, open_paths, verifier = routes(None, _look(looked), SECRET)
    server = ServiceServer(object(), extra, open_paths)  # type: ignore[arg-type]
    ready = threading.Event()
    box: dict[str, object] = {}

    def serve() -> None:
        loop = asyncio.new_event_loop()
        runner = web.AppRunner(server.app())
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        box["port"] = runner.addresses[0][1]
        box["loop"] = loop
        ready.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    ready.wait(10)
    sim = make_sim(
        seed=5,
        offers=6,
        time_scale=600,
        host_class=[{"behaviour": "offline_midrun", "share": 1.0}],
        webhooks={"url": f"http://127.0.0.1:{box['port']}{WEBHOOK_PATH}", "secret": SECRET},
    )

    async def rent() -> int:
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            offer = (await c.search_offers({}))[0]
            return (await c.create_instance(offer.id, image="img", disk_gb=10)).instance_id

    iid = asyncio.run(rent())
    assert sim.webhooks is not None
    seg = sim.market.instances[iid].segments[-1]  # its boot and its going offline, as drawn
    kinds: list[str] = []
    # the market jumps to just past each moment in turn (the sender looks at each state), not
    # waited through at 600x
    for at, kind in ((seg.running_at, "instance_started"), (seg.offline_at, "instance_offline")):
        sim.call(lambda at=at: sim.market.clock.advance(at + 1 - sim.market.clock.now()))
        deadline = time.time() + 30
        while time.time() < deadline and kind not in kinds:
            time.sleep(0.05)
            kinds = [b["notif_type"] for b in list(sim.webhooks.sent)]
    assert kinds[:3] == ["instance_created", "instance_started", "instance_offline"], kinds
    for sent in sim.webhooks.sent:
        assert set(sent) == {"event_id", "user_id", "notif_type", "subject", "message", "timestamp"}
    assert set(looked) == {(iid,)} and len(looked) == len(kinds)
    assert verifier.accepted == len(kinds) and not verifier.refusals


async def _raw(port: int, request: bytes) -> tuple[bytes, object]:
    """One request on a new keep-alive connection: its status line and the open writer."""
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        line = await asyncio.wait_for(reader.readline(), 5)
    except (ConnectionError, TimeoutError):
        line = b""
    return line, writer


async def test_token_less_webhook_connections_cannot_lock_the_token_holder_out(tmp_path):
    """[Y 9] The webhook path skips the token; a request there (a GET answered 405, a forged
    POST) must not make its connection valid, or a handful of keep-alive connections fill the
    listener's cap and keep the real token holder out. A signed webhook does make it valid."""
    import types

    looked: list[tuple[int, ...]] = []
    extra, open_paths, _ = routes(Metrics(), _look(looked), secret=SECRET)
    ctrl = types.SimpleNamespace(close=lambda: None)
    server = ServiceServer(ctrl, extra, open_paths)  # type: ignore[arg-type]
    await server.start(tmp_path / "c.sock", ("127.0.0.1", 0), tmp_path / "l.duckdb")
    tcp = server.listeners[-1]
    tcp.cap = 8
    port = int(str(server.url).rsplit(":", 1)[1])
    writers = []
    try:
        get = f"GET {WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        forged = _event(1, "f").decode()
        post = (
            f"POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(forged)}\r\n"
            f"X-Vast-Timestamp: {int(time.time())}\r\nX-Vast-Signature-256: sha256=00\r\n\r\n"
            f"{forged}"
        ).encode()
        for i in range(tcp.cap):
            line, w = await _raw(port, get if i % 2 else post)
            assert line.split()[1] in (b"405", b"401"), line
            writers.append(w)
        token = server._token
        line, w = await _raw(
            port,
            f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode(),
        )
        writers.append(w)
        assert line.split()[1:2] == [b"200"], line
        # a genuine webhook's connection is valid: Vast's keep-alive is not dropped for it
        valid_before = sum(1 for timer in tcp.open.values() if timer is None)
        raw = _event(6056, "ev-ok")
        headers = signed_headers(SECRET, raw, int(time.time()), "ev-ok")
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        line, w = await _raw(
            port,
            f"POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(raw)}\r\n{head}\r\n".encode()
            + raw,
        )
        writers.append(w)
        assert line.split()[1] == b"204", line
        assert sum(1 for timer in tcp.open.values() if timer is None) == valid_before + 1
        assert looked == [(6056,)]
    finally:
        for w in writers:
            w.close()
        await server.stop()


async def test_a_failing_webhook_writes_one_traceback_a_burst(capsys):
    """[Y 11] Whatever fails inside a request on the open webhook path answers 500 and writes
    its traceback once a burst, not once a request (34 MB a minute from one client)."""

    def look(named: tuple[int, ...]) -> list[int]:
        raise RuntimeError("the engine could not take it")

    extra, open_paths, verifier = routes(None, look, secret=SECRET)
    server = ServiceServer(object(), extra, open_paths)  # type: ignore[arg-type]
    async with TestClient(TestServer(server.app())) as client:
        for i in range(5):
            raw = _event(9, f"ev-{i}")
            headers = signed_headers(SECRET, raw, int(time.time()), f"ev-{i}")
            assert (await client.post(WEBHOOK_PATH, data=raw, headers=headers)).status == 500
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1 and "RuntimeError" in err
    assert verifier.remembered == 0  # none was taken: Vast's retries are acted on


def test_a_hostile_event_kind_reaches_the_log_cleaned(capsys):
    """The event's kind is the sender's string (cleaned where the payload is parsed): an escape
    sequence in it never reaches the controller's stderr raw."""
    looked: list[tuple[int, ...]] = []
    extra, _, verifier = routes(None, _look(looked), secret=SECRET)
    body = json.dumps(
        {
            "event_id": "ev-9",
            "user_id": 1,
            "notif_type": "\x1b]52;c;cGF3bmVk\x07offline\x1b[2J",
            "subject": "Your Vast.ai Instance #41: Instance offline",
            "message": "",
            "timestamp": time.time(),
        }
    ).encode()

    async def post() -> int:
        server = ServiceServer(object(), extra, frozenset({WEBHOOK_PATH}))  # type: ignore[arg-type]
        async with TestClient(TestServer(server.app())) as client:
            headers = signed_headers(SECRET, body, int(time.time()), "ev-9")
            return (await client.post(WEBHOOK_PATH, data=body, headers=headers)).status

    import asyncio

    assert asyncio.run(post()) == 204 and looked == [(41,)]
    err = capsys.readouterr().err
    assert "webhook" in err and "\x1b" not in err and "\x07" not in err
