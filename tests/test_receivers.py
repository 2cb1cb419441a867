"""[T] The controller's TCP listener also serves `/metrics` behind its token, and Vast's signed
webhooks: a forged, replayed or oversized one is refused and counted; a genuine one about an
instance gets it looked at by the next poll (the cadence's `look_now`)."""

from __future__ import annotations

import json
import time

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from rentwatch.notify.metrics import Metrics
from rentwatch.notify.webhooks import signed_headers
from rentwatch.run.service.receivers import WEBHOOK_PATH, routes
from rentwatch.run.service.server import ServiceServer

SECRET = "whsec-test"


def _event(iid: int, event_id: str) -> bytes:
    return json.dumps(
        {"event_id": event_id, "notif_type": "instance_offline", "data": {"instance_id": iid}}
    ).encode()


async def test_metrics_need_the_token_and_webhooks_their_signature():
    looked: list[int] = []
    metrics = Metrics()
    metrics.update("c", {"verified": 2}, 1.25, 4, 1, {"done": 1}, 0.1)
    extra, open_paths, verifier = routes(
        metrics, lambda iid: looked.append(iid) or True, secret=SECRET
    )
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
        assert looked == [6056]
        again = await client.post(WEBHOOK_PATH, data=body, headers=good)
        assert again.status < 300 and looked == [6056]  # a replay is not news
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
        assert sum(verifier.refusals.values()) >= 4 and looked == [6056]


def test_the_simulator_sends_signed_events_our_receiver_accepts(make_sim):
    """The simulated market signs its webhooks as Vast does; rentwatch's receiver verifies them
    and names the instance that went offline."""
    import asyncio
    import threading

    from aiohttp import web
    from rentwatch.market.vast.client import VastClient

    looked: list[int] = []
    extra, open_paths, verifier = routes(None, lambda iid: looked.append(iid) or True, SECRET)
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
    deadline = time.time() + 30
    while time.time() < deadline and not looked:
        time.sleep(0.1)
    assert looked == [iid], (looked, sim.webhooks.sent if sim.webhooks else None)
    assert verifier.accepted >= 1 and not verifier.refusals
