"""`rentwatch run`: the engine without the TUI, with the exit trap, and (unless `--no-api`) the
controller API served while it runs. Any way out releases every instance the controller holds
(only `--detach` leaves them running); a market gone for good (`RENTWATCH_MARKET_DOWN_S`) ends the
run through the same trap, exit code 4."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.campaign import Campaign
from ..core.errors import RentwatchError
from ..core.lifecycle import Phase
from ..core.policy import Policy
from ..core.text import clean
from ..engine.attempt import Attempt
from ..engine.ending import end_command
from ..engine.session import Session, default_key_path
from ..engine.supervisor import Outcome, Supervisor
from ..ledger import EventKind, Ledger
from ..ledger.receipt import print_receipts
from ..ledger.team.config import TeamConfig
from ..ledger.team.sync import TeamSync
from ..market.errors import REFUSALS, AuthError
from ..market.protocol import SharedClock
from ..notify.metrics import Metrics
from .alerts import Alerts, open_alerts
from .exit_trap import ExitTrap, Trapped
from .service.api import AlreadyServed
from .service.controller import Controller
from .service.server import ServiceServer, serve

__all__ = ["Trapped", "default_key_path", "run_headless"]

MARKET_FAILED = 4  # the exit code of a run the market ended (key revoked, down for too long)
MARKET_DOWN_S = 15 * 60.0  # wall seconds without one successful poll before giving up
LOOPBACK_URLS = ("http://127.0.0.1", "http://[::1]", "http://localhost")


class MarketDown(RentwatchError):
    title = "marketplace unavailable"


def _market_down_s() -> float:
    try:
        return float(os.environ.get("RENTWATCH_MARKET_DOWN_S") or MARKET_DOWN_S)
    except ValueError:
        return MARKET_DOWN_S


async def _watch_market(
    sup: Supervisor, limit_s: float, monotonic: Callable[[], float] = time.monotonic
) -> None:
    """Raise `MarketDown` once no poll has succeeded for `limit_s` wall seconds: waiting longer for
    a market that stays gone only bills unwatched rentals."""
    seen, since = sup.polls, monotonic()
    while True:
        await asyncio.sleep(min(5.0, limit_s / 4))
        if sup.polls != seen:
            seen, since = sup.polls, monotonic()
        elif monotonic() - since > limit_s:
            raise MarketDown(
                f"no answer from the market for {limit_s / 60:.0f} min "
                f"(last successful poll #{seen}); giving up"
            )


async def _run_watched(sup: Supervisor) -> Outcome:
    """The supervisor's run, ended early (its exception raised) if the market stays gone."""
    run = asyncio.ensure_future(sup.run())
    watch = asyncio.ensure_future(_watch_market(sup, _market_down_s()))
    try:
        await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (run, watch):
            t.cancel()  # a no-op on the one that is done
        await asyncio.gather(run, watch, return_exceptions=True)
    if run.cancelled():  # the watch ended it
        raise watch.exception()  # type: ignore[misc]
    return run.result()


def key_refused(sup: Supervisor, exc: AuthError) -> str:
    """The exit line of a run whose key the market refused: nothing can be stopped with it, so
    say what is left and who stops it (a verified host's own watchdog; the person, the rest)."""
    left = sup.held()
    verified = sum(1 for a in left if a.passed_preflight)
    window = sup.tender.watchdog_window_s / 60
    tail = (
        f"; {verified} verified host(s) stop themselves when their watchdog misses the "
        f"heartbeat ({window:.0f} min)"
        if verified
        else ""
    )
    rest = len(left) - verified
    if rest:
        tail += f"; {rest} unverified rental(s) bill on: destroy them in the Vast console"
    head = f"{exc.title}: the marketplace refused the API key ({clean(exc, 200)}): check "
    head += "VAST_API_KEY or ~/.config/vastai/vast_api_key"
    if not left:
        return f"{head}; nothing was left billing"
    return f"{head}; nothing could be stopped with it{tail}"


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
) -> int:
    """`market_clock`: a simulator's clock in this process, shared with the engine (tests run
    the campaign on a stepped clock with it: app/referee/stepped.py `run_stepped`). `served`:
    the controller API on the ledger's socket, and with `listen` on TCP too."""
    if served and metrics is None and (listen or metrics_listen):
        metrics = Metrics()  # one collector for `--metrics` and the API's `/metrics`
    server = (
        await _serve(Controller(campaign.name, Path(ledger_path)), listen, metrics)
        if served
        else None
    )
    try:
        t0: list[float] = []

        def log(line: str) -> None:
            now = session.market.now()
            if not t0:
                t0.append(now)
            s = int(now - t0[0])
            # lines quote host and market text (status lines, GPU names): one line, no escapes
            text = clean(line, 2000)
            print(f"[{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}] {text}", flush=True)

        ledger = Ledger(ledger_path)
        session = Session.open(
            market_url,
            api_key,
            ledger,
            campaign,
            policy,
            Path(key_path) if key_path else None,
            log=log,
            owns_ledger=True,
            http_timeout_s=http_timeout_s,
            market_clock=market_clock,
        )
        sup = session.sup
        # the team store: shipped and pulled beside the run, never in its way
        sync = TeamSync(ledger, team, market_url, campaign.name, log).start() if team else None
        alerts = open_alerts(
            sup,
            session.ledger,
            notify,
            metrics_listen,
            secrets=(api_key, key_path or str(default_key_path())),
            metrics=metrics,
        )
        if server is not None:
            server.ctrl.bind(sup)
        if on_supervisor is not None:
            on_supervisor(sup)
        main = asyncio.current_task()

        def cancel_main(_signum: int) -> None:
            if main is not None:
                main.cancel()

        # once the run is ending (its own release or detach begun, or the trap fired) a signal is
        # noted, not acted on: cancelling the main task then would cut a release short, or escape
        # from the session's close as a CancelledError
        trap = ExitTrap(cancel_main, log)
        with trap.installed(asyncio.get_running_loop()):
            return await _trapped_run(
                sup, session, alerts, trap, log, campaign, ledger_path, detach, sync
            )
    finally:
        if server is not None:
            server.ctrl.close()
            await server.stop()


async def _serve(
    ctrl: Controller, listen: str | None, metrics: Metrics | None
) -> ServiceServer | None:
    """The run's controller API; None where it cannot be served and was not asked for by name
    (the campaign matters more than its API)."""
    try:
        server = await serve(ctrl, listen, metrics)
    except AlreadyServed as exc:
        raise RentwatchError(str(exc)) from None
    except OSError as exc:
        if listen:
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


async def _trapped_run(
    sup: Supervisor,
    session: Session,
    alerts: Alerts,
    trap: ExitTrap,
    log: Callable[[str], None],
    campaign: Campaign,
    ledger_path: str,
    detach: bool,
    sync: TeamSync | None = None,
) -> int:
    last_word = ("exit", "")  # what the notice at the end says
    code = 1
    try:
        try:
            await session.start()
            outcome = await _run_watched(sup)
        except asyncio.CancelledError:
            signum = trap.caught[-1] if trap.caught else signal.SIGINT
            raise Trapped(signum) from None
        log(f"end    {outcome.reason}")
        if outcome.ok:
            last_word = ("end", outcome.reason)
        elif not sup.blame_book.fault:  # a campaign fault has been told already, once
            last_word = ("exit", outcome.reason)
        else:
            last_word = ("", "")
        trap.ending = True
        left = detach or sup.detach_asked  # or the operator's shutdown through the service API
        if left:
            await session.detach(
                "--detach: left running on purpose"
                if detach
                else "operator shut the controller down, leaving the fleet running"
            )
            log("detach instances left running on purpose (recorded)")
        else:
            await session.release("rule:campaign_end", f"campaign ended: {outcome.reason}")
            _say_what_bills(sup, log, campaign.name, ledger_path)
        code = 0 if outcome.ok else 3
        if trap.fired:  # a signal as the campaign ended: the end went on; the exit code says so
            name = trap.name(0)
            sup.journal.fact(
                EventKind.TRAP,
                None,
                actor="trap",
                reason=f"signal {name} as the campaign ended: its "
                f"{'detach' if left else 'release'} was not cut short",
                detail={"held": [a.instance_id for a in sup.held()]},
            )
            code = trap.exit_code(0)
    except BaseException as exc:  # the trap: whatever happened, nothing keeps billing unwatched
        trap.ending = True  # a second Ctrl-C must not interrupt the release
        why = f"signal {exc}" if isinstance(exc, Trapped) else f"{type(exc).__name__}: {exc}"
        held = {a.instance_id for a in sup.held()}
        before = set(sup.fleet.attempts)
        # the release first, the ledger after: a release must not wait on a disk that fails
        log(f"trap   {why}: releasing {len(held)} held instance(s) and any create in flight")
        try:
            await session.release("trap", f"exit trap: {why}")  # however long it takes
        except BaseException as exc2:
            log(f"trap   release incomplete: {exc2!r}")
        held |= set(sup.fleet.attempts) - before  # found under the label, or landed meanwhile
        sup.journal.fact(
            EventKind.TRAP,
            None,
            actor="trap",
            reason=f"exit trap fired: {why}",
            detail={"held": sorted(held)},
        )
        kind = "trapped" if isinstance(exc, Trapped) else "exit"
        last_word = ("market_down" if isinstance(exc, MarketDown) else kind, why)
        if isinstance(exc, AuthError):  # one line: the key, and what still bills
            last_word = ("key_refused", key_refused(sup, exc))
            print(f"rentwatch: {last_word[1]}", file=sys.stderr)
            code = MARKET_FAILED
        elif isinstance(exc, RentwatchError):  # an error we name: one line, no traceback
            print(f"rentwatch: {clean(exc.title, 80)}: {clean(exc, 1000)}", file=sys.stderr)
            code = MARKET_FAILED if isinstance(exc, (MarketDown, *REFUSALS)) else 1
        elif not isinstance(exc, Trapped):
            traceback.print_exception(exc, file=sys.stderr)
            code = 1
        else:
            code = 128 + exc.signum
    finally:
        end_reason = f"controller exits with code {code}"
        try:
            session.mark_end(end_reason)  # first: the notice tells the receipt printed below
        finally:
            if last_word[0]:
                alerts.ended(code, last_word[1], last_word[0], left=len(sup.held()))
            alerts.close()
            if sync is not None:  # the end's events shipped (when the store answers)
                await asyncio.to_thread(sync.stop)
            await session.end(end_reason)
        if session.ledger.fallback_note:  # the disk refused events: where they are now
            print(f"rentwatch: {session.ledger.fallback_note}", file=sys.stderr, flush=True)
        receipts = _receipts(ledger_path, campaign.name)  # as `rentwatch receipt` reads it
        if receipts is not None:
            print_receipts(receipts)
        if campaign.jobs:
            print(f"artifacts in {session.artifacts_root / campaign.name}", flush=True)
        if code != 0:  # whatever ended it, the last lines say what still bills
            print("\n".join(still_billing(sup, campaign.name, ledger_path)), flush=True)
    return code


def _say_what_bills(
    sup: Supervisor, log: Callable[[str], None], campaign: str, ledger_path: str
) -> None:
    """The end leaves proven rentals stopped (automation never destroys them): say what they
    bill and how to end them, so a finished run is not mistaken for one that left nothing."""
    stopped = [a for a in sup.fleet.on_market() if a.life.phase == Phase.STOPPED]
    if stopped:
        per_day = sum(a.storage_dph for a in stopped) * 24
        log(
            f"end    {len(stopped)} stopped rental(s) still bill storage, ${per_day:.3f}/day: "
            f"{end_command(campaign, ledger_path, sup.market.base_url, destroy=True)}"
        )


def _receipts(ledger_path: str, campaign: str) -> list[dict[str, Any]] | None:
    """What the campaign cost, from the ledger as the end left it (its campaign_end written)."""
    try:
        with Ledger(ledger_path, read_only=True) as ledger:
            return ledger.receipt(campaign)
    except Exception as exc:  # the run's end must not fail on its summary
        print(f"rentwatch: no receipt: {type(exc).__name__}: {clean(exc, 300)}", file=sys.stderr)
        return None


def _state(a: Attempt) -> tuple[str, float]:
    """A rental's state in words and what it bills per hour in that state."""
    both = a.gpu_dph + a.storage_dph
    if a.life.phase == Phase.STOPPED and a.resumes_by_itself:
        return "paused by the market (a bid: resumes by itself unless stopped)", both
    if a.life.phase == Phase.STOPPED:
        return "stopped (storage only)", a.storage_dph
    if a.life.phase == Phase.ABANDONED:
        return "given up, its destroy not confirmed", both
    proven = "verified" if a.passed_preflight else "never verified"
    return f"{a.life.phase.value} ({proven}), stop not confirmed", both


def still_billing(sup: Supervisor, campaign: str, ledger_path: str) -> list[str]:
    """The last lines of a run that did not end well: each rental it leaves on the market with
    what it bills per hour, and the `rentwatch end` command that ends them, as it works when
    pasted; one line when nothing is left."""
    left = sorted(sup.fleet.on_market(), key=lambda a: a.instance_id)
    if not left:
        return [f"left billing: nothing of {campaign} is on the market as this run last saw it"]
    lines = [f"left billing: {len(left)} rental(s) of {campaign} still on the market:"]
    for a in left:
        state, dph = _state(a)
        lines.append(f"  i:{a.instance_id} m:{a.machine_id} {a.gpu_name}: {state}, ${dph:.4f}/h")
    stopped = all(a.life.phase == Phase.STOPPED and not a.resumes_by_itself for a in left)
    lines.append(f"end them: {end_command(campaign, ledger_path, sup.market.base_url, stopped)}")
    if not stopped and any(a.life.phase == Phase.STOPPED for a in left):
        lines.append("  (add --destroy to end the stopped ones' storage too)")
    return lines
