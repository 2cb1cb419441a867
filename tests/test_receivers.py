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
