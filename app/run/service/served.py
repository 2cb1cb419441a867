"""`rentwatch run --headless` served: the same run, exit trap and exit codes, plus the controller
API on a socket (and TCP with a token), and beside it on the same listener `GET /metrics` and,
with `VAST_WEBHOOK_SECRET`, Vast's signed webhooks at `POST /v1/webhooks/vast` (HMAC-authenticated:
vast-ai/docs `notification-webhooks.mdx`). A verified webhook is a reason to poll now, never a
verdict: the payload never changes a rental."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from ...core.campaign import Campaign
from ...core.errors import RentwatchError
from ...core.policy import Policy
from ...notify.metrics import Metrics, aiohttp_handler
from ...notify.webhooks import WebhookEvent, WebhookVerifier, webhook_handler
from . import api, registry
from .controller import Controller

WEBHOOK_PATH = "/v1/webhooks/vast"
SECRET_ENV = "VAST_WEBHOOK_SECRET"


async def serve_headless(
    campaign: Campaign,
    policy: Policy,
    market_url: str,
    api_key: str,
    ledger_path: str,
    listen: str | None = None,
    say: Callable[[str], None] = lambda line: print(line, flush=True),
    **run_kw: Any,
) -> int:
    """`run_headless` itself (`run_kw` passed on), with the controller API served while it runs."""
    from ..headless import run_headless
    from .server import ServiceServer, parse_listen

    # the same run, served or not (the controller API binds to its supervisor when served)
    run_args = (campaign, policy, market_url, api_key, ledger_path)
    path = Path(ledger_path)
    ctrl = Controller(campaign.name, path)
    tcp = parse_listen(listen) if listen else None
    metrics = Metrics() if (tcp or run_kw.get("metrics_listen")) else None
    run_kw["metrics"] = metrics
    extra, open_paths, _ = routes(metrics, ctrl.look) if tcp else ([], frozenset(), None)
    server = ServiceServer(ctrl, extra, open_paths)
    try:
        await server.start(registry.socket_path_for(path), tcp, path)
    except api.AlreadyServed as exc:
        raise RentwatchError(str(exc)) from None
    except OSError as exc:
        await server.stop()
        if tcp is not None:  # asked for by name: not having it is an error
            raise RentwatchError(f"cannot serve the controller API: {exc}") from None
        # the campaign matters more than its API: run it, unserved, and say so
        print(f"rentwatch: warning: not serving the controller API: {exc}", file=sys.stderr)
        return await run_headless(*run_args, **run_kw)
    try:
        server.register()
    except OSError as exc:  # `ls` will not list it; the socket still answers
        print(f"rentwatch: warning: not registered for `rentwatch ls`: {exc}", file=sys.stderr)
    say(f"serving  controller API on unix:{server.socket_path}")
    if server.url:
        say(f"serving  controller API on {server.url} (token in {server.token_file})")
        if tcp and tcp[0] not in ("127.0.0.1", "::1", "localhost"):
            say("warning  the API is plain HTTP: reach it through SSH rather than the open network")
    try:
        return await run_headless(*run_args, **run_kw, on_supervisor=ctrl.bind)
    finally:
        ctrl.close()
        await server.stop()


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
