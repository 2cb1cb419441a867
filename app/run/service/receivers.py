"""What the controller's listener serves besides its API: `GET /metrics` and, with
`VAST_WEBHOOK_SECRET`, Vast's signed webhooks at `POST /v1/webhooks/vast` (HMAC-authenticated:
vast-ai/docs `notification-webhooks.mdx`). A verified webhook is a reason to poll now, never a
verdict: the payload never changes a rental."""

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
    look: Callable[[tuple[int, ...]], list[int]],
    secret: str | None = None,
    clock: Callable[[], float] = time.time,
) -> tuple[list[web.RouteDef], frozenset[str], WebhookVerifier | None]:
    """The extra routes, the paths that authenticate themselves, and the verifier. `look(named)`
    asks the engine for a poll now and returns the held instances among `named`."""
    out: list[web.RouteDef] = []
    if metrics is not None:
        out.append(web.get("/metrics", aiohttp_handler(metrics)))
    secret = secret if secret is not None else os.environ.get(SECRET_ENV)
    if not secret:
        return out, frozenset(), None
    verifier = WebhookVerifier(secret)

    def on_event(event: WebhookEvent) -> None:
        asked = look(event.named)
        about = f", asking about {' '.join(f'i:{i}' for i in asked)}" if asked else ""
        print(f"webhook {event.notif_type[:40]}: polling now{about}", file=sys.stderr)

    out.append(web.post(WEBHOOK_PATH, webhook_handler(verifier, on_event, clock)))
    return out, frozenset({WEBHOOK_PATH}), verifier
