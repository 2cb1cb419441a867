"""`rentwatch run --headless` served: the same run, exit trap and exit codes, plus the controller
API on a socket (and TCP with a token), the metrics and the market's webhooks beside it."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...core.campaign import Campaign
from ...core.errors import RentwatchError
from ...core.policy import Policy
from . import api, registry
from .controller import Controller


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
    from ...notify.metrics import Metrics
    from ..headless import run_headless
    from .receivers import routes
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
    entry = registry.Entry(
        campaign=campaign.name,
        pid=os.getpid(),
        socket=str(server.socket_path),
        ledger=str(path.resolve()),
        started_at=ctrl.started_at,
        url=server.url,
        token_file=str(server.token_file) if server.token_file else None,
    )
    try:
        registry.register(entry)
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
        with contextlib.suppress(OSError):
            registry.unregister(entry.pid)
