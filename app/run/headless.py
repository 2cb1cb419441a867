"""`rentwatch run` and `rentwatch controller`: the engine hosted on this process's main loop, with
the exit trap, and the controller API served while it runs (unless `--no-api`). Any way out
releases every instance the controller holds (only `--detach` or a person's detach leaves them
running); a market gone for good (`RENTWATCH_MARKET_DOWN_S`) ends a run through the same trap,
exit code 4."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ..core.campaign import Campaign
from ..core.errors import RentwatchError
from ..core.policy import Policy
from ..core.text import clean
from ..engine.session import Session, default_key_path
from ..engine.supervisor import Supervisor
from ..ledger import Ledger
from ..ledger.team.config import TeamConfig
from ..ledger.team.sync import TeamSync
from ..market.protocol import SharedClock
from ..notify.metrics import Metrics
from .alerts import open_alerts
from .exit_trap import ExitTrap, Trapped
from .host import Host, Hosting
from .service.api import AlreadyServed
from .service.controller import Controller
from .service.server import ServiceServer, serve

__all__ = ["Trapped", "default_key_path", "run_headless"]

MARKET_DOWN_S = 15 * 60.0  # wall seconds without one successful poll before giving up
LOOPBACK_URLS = ("http://127.0.0.1", "http://[::1]", "http://localhost")


def _market_down_s() -> float:
    try:
        return float(os.environ.get("RENTWATCH_MARKET_DOWN_S") or MARKET_DOWN_S)
    except ValueError:
        return MARKET_DOWN_S


async def run_headless(
    campaign: Campaign,
    policy: Policy,
    market_url: str,
    api_key: str,
    ledger_path: str,
    detach: bool = False,
    key_path: str | None = None,
    on_supervisor: Callable[[Supervisor], None] | None = None,
    http_timeout_s: float | None = None,
    notify: Sequence[str] = (),
    metrics_listen: str | None = None,
    metrics: Metrics | None = None,
    team: TeamConfig | None = None,
    market_clock: SharedClock | None = None,
    served: bool = False,
    listen: str | None = None,
    adopt_all: bool = False,
    observe_only: bool = False,
    hosting: Hosting | None = None,
    log: Callable[[str], None] | None = None,
) -> int:
    """`market_clock`: a simulator's clock in this process, shared with the engine (tests run
    the campaign on a stepped clock with it: app/referee/stepped.py `run_stepped`). `served`:
    the controller API on the ledger's socket, and with `listen` on TCP too. `hosting`: how a
    controller process differs (else a run's); `log`: its lines (else stamped in market time)."""
    plan = hosting or Hosting(detach=detach, market_down_s=_market_down_s())
    if served and metrics is None and (listen or metrics_listen):
        metrics = Metrics()  # one collector for `--metrics` and the API's `/metrics`
    ctrl = Controller(campaign.name, Path(ledger_path))
    required = bool(listen) or plan.for_dashboards
    server = await _serve(ctrl, listen, metrics, required) if served else None
    try:
        t0: list[float] = []

        def stamped(line: str) -> None:
            now = session.market.now()
            if not t0:
                t0.append(now)
            s = int(now - t0[0])
            # lines quote host and market text (status lines, GPU names): one line, no escapes
            text = clean(line, 2000)
            print(f"[{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}] {text}", flush=True)

        say = log or stamped
        ledger = Ledger(ledger_path)
        session = Session.open(
            market_url,
            api_key,
            ledger,
            campaign,
            policy,
            Path(key_path) if key_path else None,
            log=say,
            adopt_all=adopt_all,
            owns_ledger=True,
            http_timeout_s=http_timeout_s,
            observe_only=observe_only,
            market_clock=market_clock,
        )
        # the team store: shipped and pulled beside the run, never in its way
        sync = TeamSync(ledger, team, market_url, campaign.name, say).start() if team else None
        secrets = (api_key, key_path or str(default_key_path()))
        host = Host(
            session,
            ctrl if server is not None else None,
            say,
            plan,
            lambda sup: open_alerts(sup, ledger, notify, metrics_listen, secrets, metrics),
            sync,
            on_error=lambda line: say(f"error  {line}"),
        )
        if on_supervisor is not None:
            on_supervisor(session.sup)
        main = asyncio.current_task()

        def cancel_main(_signum: int) -> None:
            if main is not None:
                main.cancel()

        # once the run is ending (its own release or detach begun, or the trap fired) a signal is
        # noted, not acted on: cancelling the main task then would cut a release short, or escape
        # from the session's close as a CancelledError
        trap = ExitTrap(cancel_main, say)
        with trap.installed(asyncio.get_running_loop()):
            return await host.run(trap)
    finally:
        if server is not None:
            ctrl.close()
            await server.stop()


async def _serve(
    ctrl: Controller, listen: str | None, metrics: Metrics | None, required: bool
) -> ServiceServer | None:
    """The run's controller API; None where it cannot be served and is not `required` (a run's
    campaign matters more than its API; a dashboard's engine is nothing without it)."""
    try:
        server = await serve(ctrl, listen, metrics)
    except AlreadyServed as exc:
        raise RentwatchError(str(exc)) from None
    except OSError as exc:
        if required:
            raise RentwatchError(f"cannot serve the controller API: {exc}") from None
        print(f"rentwatch: warning: not serving the controller API: {exc}", file=sys.stderr)
        return None
    print(f"serving  controller API on unix:{server.socket_path}", flush=True)
    if server.url:
        line = f"serving  controller API on {server.url} (token in {server.token_file})"
        print(line, flush=True)
        if server.url.rpartition(":")[0] not in LOOPBACK_URLS:
            print("warning  the API is plain HTTP: reach it through SSH, not the open network")
    return server
