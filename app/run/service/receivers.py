"""What the controller's listener serves besides its API: `GET /metrics` (Prometheus text,
behind the token on TCP like every route) and, when `VAST_WEBHOOK_SECRET` is set, Vast's signed
webhooks at `POST /v1/webhooks/vast` (authenticated by their HMAC signature instead of the
token: Vast cannot send ours; vast-ai/docs guides/reference/notification-webhooks.mdx).

A verified webhook is evidence, never belief: the instance it names is asked about by the next
poll (`Cadence.look_now`), and what the market answers then is what counts."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from aiohttp import web

from ...notify.metrics import Metrics, aiohttp_handler
from ...notify.webhooks import WebhookEvent, WebhookVerifier, webhook_handler

WEBHOOK_PATH = "/v1/webhooks/vast"
SECRET_ENV = "VAST_WEBHOOK_SECRET"


def routes(
    metrics: Metrics | None,
    look_now: Callable[[int], bool],
    secret: str | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[list[web.RouteDef], frozenset[str], WebhookVerifier | None]:
    """The extra routes, the paths that carry their own authentication, and the verifier (its
    refusals counted by reason)."""
    out: list[web.RouteDef] = []
    if metrics is not None:
        out.append(web.get("/metrics", aiohttp_handler(metrics)))
    secret = secret if secret is not None else os.environ.get(SECRET_ENV)
    if not secret:
        return out, frozenset(), None
    verifier = WebhookVerifier(secret)

    def on_event(event: WebhookEvent) -> None:
        if event.instance_id is not None and look_now(event.instance_id):
            print(
                f"webhook {event.notif_type[:40]} names i:{event.instance_id}: "
                "looked at the next poll",
                file=sys.stderr,
            )

    out.append(web.post(WEBHOOK_PATH, webhook_handler(verifier, on_event, clock)))
    return out, frozenset({WEBHOOK_PATH}), verifier
