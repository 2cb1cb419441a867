"""The one way an engine is hosted (`run_headless`), for `rentwatch run`, a controller process and
a `--foreground` dashboard's engine thread: its session served as a controller, its alerts and
team sync beside it, polled until it ends, and its end: released (by the exit trap where anything
went wrong; a market gone for good, `RENTWATCH_MARKET_DOWN_S`, ends a run through it, exit code
4) or detached, recorded, with the last word to the alerts and, on a terminal, what is left
billing."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.campaign import Campaign
from ..core.errors import RentwatchError
from ..core.lifecycle import Phase
from ..core.policy import Policy
from ..core.text import clean
from ..engine.attempt import Attempt
from ..engine.ending import end_command
from ..engine.hosts.ssh import loop_time
from ..engine.rounds import rounds
from ..engine.session import Session, default_key_path
from ..engine.supervisor import Supervisor
from ..ledger import EventKind, Ledger
from ..ledger.receipt import print_receipts
from ..ledger.team.config import TeamConfig
from ..ledger.team.sync import TeamSync
from ..market.errors import REFUSALS, AuthError
from ..market.protocol import SharedClock
from ..notify.metrics import Metrics
from .alerts import Alerts, open_alerts
from .exit_trap import ExitTrap, Trapped
from .service import registry
from .service.api import AlreadyServed, Refused
from .service.controller import Controller, EngineFailed
from .service.server import ServiceServer, parse_listen, routes

MARKET_FAILED = 4  # the exit code of a run the market ended (key revoked, down for too long)

# how a dashboard's engine releases what it holds for each way it is asked to end
RELEASES = {
    "stop": ("human", "dashboard closed: stop all held"),
    "trap": ("trap", "dashboard closed: stop all held"),
    # a demo's controller that nobody watched nor chose to leave running ends itself: no person
    # stopped anything
    "unwatched": ("rule:unwatched", "nobody watched this demo and nobody chose to keep it"),
}


class MarketDown(RentwatchError):
    title = "marketplace unavailable"


@dataclass
class Hosting:
    """Where hosts differ, each for a reason its user sees."""

    # `run` ends with its campaign and on a poll's error; a dashboard's engine polls on after
    # its campaign (a person reads the end, then quits) and says a poll's error, then polls again
    for_dashboards: bool = False
    detach: bool = False  # `run --detach`: its end leaves the fleet running, recorded
    market_down_s: float | None = None  # `run` gives up on a market gone this long
    end_unwatched_s: float | None = None  # a demo nobody watches nor kept ends itself
    cap_s: float = float("inf")  # a poll at least this often (wall seconds: a dashboard's)
    who: str = "controller"  # who exits, as the alerts' last word says
    # a demo's built-in market (its URL and key file) in the controller's entry, for `ls`
    market_entry: tuple[str, str] | None = None
    # a line said on the terminal the host runs in, or on its log (none under a dashboard)
    tell: Callable[[str], None] | None = print


class Host:
    """One session hosted: `run()` on the loop that owns it, `stop(mode)` from that loop."""

    def __init__(
        self,
        session: Session,
        ctrl: Controller | None,
        plan: Hosting,
        open_alerts: Callable[[Supervisor], Alerts],
        sync: TeamSync | None,
        on_error: Callable[[str], None],
    ) -> None:
        self.session = session
        self.sup = session.sup
        self.log = self.sup.journal.say  # the session's log, and the dashboards' decision log
        self.plan = plan
        self._open_alerts = open_alerts
        self.sync = sync
        self.on_error = on_error
        self.ctrl = ctrl
        self.mode: str | None = None  # a dashboard's engine asked to end, and how
        # what keeps the engine from working (it could not start, the market rejects the key):
        # said until it clears, and a dashboard's exit status when it has not cleared
        self.failure: str | None = None
        # told once polling, or once it failed before it could (a dashboard's engine thread)
        self.started: Callable[[], None] = lambda: None

    def stop(self, mode: str) -> None:
        """End with `mode` at the poll loop's next turn, unless an earlier ask chose one."""
        if self.mode is None:
            self.mode = mode
            self.sup.cadence.wake.set()

    async def _asked(self, mode: str) -> None:
        """A shutdown through the controller API."""
        if self.plan.for_dashboards:
            self.stop(mode)
        elif self.sup.finished is not None:
            raise Refused(f"the campaign has already ended ({self.sup.finished.reason})")
        else:  # the campaign ends: its end records each instance left running with `detach`
            self.sup.shut_down(mode == "detach", f"operator shut the controller down ({mode})")

    async def run(self, trap: ExitTrap) -> int:
        """Host until the end; returns the exit code. A first signal cancels the task running
        this (`trap`): the exit trap then releases what is held."""
        session, sup = self.session, self.sup
        try:
            alerts = self._open_alerts(sup)
        except Exception as exc:  # no supervision without what the person asked to hear
            self.failure = f"alerts could not start: {exc}"
            self.on_error(self.failure)
            self.started()
            await session.end(self.failure)
            if self.sync is not None:
                await asyncio.to_thread(self.sync.stop)
            raise EngineFailed(self.failure) from exc
        last_word = ("exit", "")
        code = 1
        try:
            try:
                await self._start()
                await self._poll()
            except asyncio.CancelledError:
                signum = trap.caught[-1] if trap.caught else signal.SIGINT
                raise Trapped(signum) from None
            trap.ending = True
            outcome = sup.finished if self.mode is None else None
            if outcome is not None:
                self.log(f"end    {outcome.reason}")
            await self._end()
            if outcome is not None:
                code = 0 if outcome.ok else 3
                # a campaign fault has been told already, once
                kind = "end" if outcome.ok else "" if sup.blame_book.fault else "exit"
                last_word = (kind, outcome.reason)
            else:
                code = 1 if self.failure else 0
                last_word = (
                    "end" if code == 0 else "exit",
                    f"{self.plan.who} exits with code {code}",
                )
            if trap.fired:  # a signal as the campaign ended: the end went on; the exit code says so
                left = self.plan.detach or sup.detach_asked or self.mode == "detach"
                sup.journal.fact(
                    EventKind.TRAP,
                    None,
                    actor="trap",
                    reason=f"signal {trap.name(0)} as the campaign ended: its "
                    f"{'detach' if left else 'release'} was not cut short",
                    detail={"held": [a.instance_id for a in sup.held()]},
                )
                code = trap.exit_code(0)
        except BaseException as exc:  # the trap: whatever happened, nothing keeps billing unwatched
            trap.ending = True  # a second Ctrl-C must not interrupt the release
            last_word, code = await self._trapped(exc)
        finally:
            end_reason = f"{self.plan.who} exits with code {code}"
            try:
                session.mark_end(end_reason)  # first: the notice tells the receipt printed below
            finally:
                if last_word[0]:
                    alerts.ended(code, last_word[1], last_word[0], left=len(sup.held()))
                alerts.close()
                if self.sync is not None:  # the end's events shipped (when the store answers)
                    await asyncio.to_thread(self.sync.stop)
                await session.end(end_reason)
                self.started()
            self._tell_end(code)
        return code

    async def _start(self) -> None:
        if self.ctrl is not None:  # answered while the session prepares: "ready" says when
            self.ctrl.bind(self.sup, end=self._asked)
        try:
            await self.session.start()
        except Exception as exc:  # `started` is told once its end is done
            self.failure = f"engine could not start: {exc}"
            self.on_error(self.failure)
            raise
        self.started()

    async def _poll(self) -> None:
        """Poll until the end; a market gone for good (`market_down_s`) raises `MarketDown`."""
        sup, plan = self.sup, self.plan

        def until() -> bool:
            return self.mode is not None or (not plan.for_dashboards and sup.finished is not None)

        def polled() -> None:
            if sup.failure is None:
                self.failure = None  # the key works again
            ctrl, window = self.ctrl, plan.end_unwatched_s
            if window is not None and ctrl and not ctrl.kept and ctrl.unwatched_for() >= window:
                self.log(
                    f"end    nobody has watched for {window / 60:.0f} min and "
                    "nobody chose to leave it running: stopping what it holds"
                )
                self.stop("unwatched")

        def failed(exc: Exception) -> None:
            if isinstance(exc, AuthError):  # said once, shown in the header until it clears
                if self.failure is None:
                    self.failure = f"the marketplace rejected the API key: {exc}"
                    self.on_error(self.failure)
            else:  # said, and the loop goes on
                self.on_error(f"poll failed: {type(exc).__name__}: {exc}")

        poll = rounds(
            sup,
            until,
            polled,
            failed if plan.for_dashboards else None,
            plan.cap_s,
            loop_time,
            0.05 if plan.for_dashboards else 0.02,
            wake=sup.cadence.wake,
        )
        if plan.market_down_s is None:
            await poll
            return
        run = asyncio.ensure_future(poll)
        watch = asyncio.ensure_future(_watch_market(sup, plan.market_down_s))
        try:
            await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (run, watch):
                t.cancel()  # a no-op on the one that is done
            await asyncio.gather(run, watch, return_exceptions=True)
        if run.cancelled():  # the watch ended it
            raise watch.exception()  # type: ignore[misc]
        run.result()

    async def _end(self) -> None:
        """The fleet released or left running, recorded."""
        session, sup, mode = self.session, self.sup, self.mode
        if self.plan.detach or sup.detach_asked or mode == "detach":
            await session.detach(
                "--detach: left running on purpose"
                if self.plan.detach
                else "operator chose detach on quit"
                if mode == "detach"
                else "operator shut the controller down, leaving the fleet running"
            )
            self.log("detach instances left running on purpose (recorded)")
        elif mode is not None:
            await session.release(*RELEASES.get(mode, RELEASES["stop"]))
        else:
            assert sup.finished is not None
            await session.release("rule:campaign_end", f"campaign ended: {sup.finished.reason}")
            self._say_what_bills()

    async def _trapped(self, exc: BaseException) -> tuple[tuple[str, str], int]:
        """Release everything after `exc`; returns the alerts' last word and the exit code."""
        sup = self.sup
        why = f"signal {exc}" if isinstance(exc, Trapped) else f"{type(exc).__name__}: {exc}"
        held = {a.instance_id for a in sup.held()}
        before = set(sup.fleet.attempts)
        # the release first, the ledger after: a release must not wait on a disk that fails
        self.log(f"trap   {why}: releasing {len(held)} held instance(s) and any create in flight")
        try:
            await self.session.release("trap", f"exit trap: {why}")  # however long it takes
        except BaseException as exc2:
            self.log(f"trap   release incomplete: {exc2!r}")
        held |= set(sup.fleet.attempts) - before  # found under the label, or landed meanwhile
        sup.journal.fact(
            EventKind.TRAP,
            None,
            actor="trap",
            reason=f"exit trap fired: {why}",
            detail={"held": sorted(held)},
        )
        self.failure = self.failure or why
        kind = "trapped" if isinstance(exc, Trapped) else "exit"
        if isinstance(exc, AuthError):  # one line: the key, and what still bills
            line = key_refused(sup, exc)
            print(f"rentwatch: {line}", file=sys.stderr)
            return ("key_refused", line), MARKET_FAILED
        if isinstance(exc, RentwatchError):  # an error we name: one line, no traceback
            print(f"rentwatch: {clean(exc.title, 80)}: {clean(exc, 1000)}", file=sys.stderr)
            code = MARKET_FAILED if isinstance(exc, (MarketDown, *REFUSALS)) else 1
            return ("market_down" if isinstance(exc, MarketDown) else kind, why), code
        if isinstance(exc, Trapped):
            return (kind, why), 128 + exc.signum
        traceback.print_exception(exc, file=sys.stderr)
        return (kind, why), 1

    def _tell_end(self, code: int) -> None:
        """On the host's terminal: the ledger's fallback, the receipt, the artifacts, and after
        an end that was not clean what is left on the market."""
        tell, ledger = self.plan.tell, self.session.ledger
        if ledger.fallback_note:  # the disk refused events: where they are now
            print(f"rentwatch: {ledger.fallback_note}", file=sys.stderr, flush=True)
        if tell is None:
            return
        campaign = self.sup.campaign
        receipts = _receipts(str(ledger.path), campaign.name)  # as `rentwatch receipt` reads it
        if receipts is not None:
            print_receipts(receipts)
        if campaign.jobs:
            tell(f"artifacts in {self.session.artifacts_root / campaign.name}")
        if code != 0:  # whatever ended it, the last lines say what still bills
            tell("\n".join(still_billing(self.sup, campaign.name, str(ledger.path))))
        sys.stdout.flush()

    def _say_what_bills(self) -> None:
        """The end leaves proven rentals stopped (automation never destroys them): say what
        they bill and how to end them, so a finished run is not mistaken for one that left
        nothing."""
        sup = self.sup
        stopped = [a for a in sup.fleet.on_market() if a.life.phase == Phase.STOPPED]
        if stopped:
            per_day = sum(a.storage_dph for a in stopped) * 24
            command = end_command(
                sup.campaign.name, str(sup.ledger.path), sup.market.base_url, destroy=True
            )
            self.log(
                f"end    {len(stopped)} stopped rental(s) still bill storage, "
                f"${per_day:.3f}/day: {command}"
            )


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
    hosted: Callable[[Host, ServiceServer | None], None] | None = None,
    http_timeout_s: float | None = None,
    notify: Sequence[str] = (),
    metrics_listen: str | None = None,
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
    controller process or a dashboard's engine differs (else a run's); `log`: its lines (else
    stamped in market time); `hosted`: told the host and its server before it runs. Off the
    main thread (a dashboard's engine) the signals are the dashboard's: no exit trap on them."""
    plan = hosting or Hosting(detach=detach, market_down_s=_market_down_s())
    # one collector for `--metrics` and the API's `/metrics`
    metrics = Metrics() if served and (listen or metrics_listen) else None
    ctrl = Controller(campaign.name, Path(ledger_path))
    required = bool(listen) or plan.for_dashboards
    server = await _serve(ctrl, listen, metrics, required, plan) if served else None
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
            plan,
            lambda sup: open_alerts(sup, ledger, notify, metrics_listen, secrets, metrics),
            sync,
            on_error=lambda line: say(f"error  {line}"),
        )
        if hosted is not None:
            hosted(host, server)
        main = asyncio.current_task()

        def cancel_main(_signum: int) -> None:
            if main is not None:
                main.cancel()

        # once the run is ending (its own release or detach begun, or the trap fired) a signal is
        # noted, not acted on: cancelling the main task then would cut a release short, or escape
        # from the session's close as a CancelledError
        trap = ExitTrap(cancel_main, say)
        if threading.current_thread() is not threading.main_thread():
            return await host.run(trap)
        with trap.installed(asyncio.get_running_loop()):
            return await host.run(trap)
    finally:
        if server is not None:
            await server.stop()


async def _serve(
    ctrl: Controller,
    listen: str | None,
    metrics: Metrics | None,
    required: bool,
    plan: Hosting,
) -> ServiceServer | None:
    """`ctrl` served on its ledger's socket and, with `listen` (`tcp:HOST:PORT`), on TCP with the
    metrics and webhooks beside it; registered. None where it cannot be served and is not
    `required` (a run's campaign matters more than its API; a dashboard's engine is nothing
    without it)."""
    tcp = parse_listen(listen) if listen else None
    extra, open_paths, _ = routes(metrics, ctrl.look) if tcp else ([], frozenset(), None)
    server = ServiceServer(ctrl, extra, open_paths)
    try:
        try:
            await server.start(registry.socket_path_for(ctrl.ledger_path), tcp, ctrl.ledger_path)
            server.register(plan.market_entry)
        except BaseException:
            await server.stop()
            raise
    except AlreadyServed as exc:
        raise RentwatchError(str(exc)) from None
    except OSError as exc:
        if required:
            raise RentwatchError(f"cannot serve the controller API: {exc}") from None
        print(f"rentwatch: warning: not serving the controller API: {exc}", file=sys.stderr)
        return None
    if plan.tell is None:  # under a dashboard: nothing on the terminal it draws on
        return server
    print(f"serving  controller API on unix:{server.socket_path}", flush=True)
    if server.url:
        line = f"serving  controller API on {server.url} (token in {server.token_file})"
        print(line, flush=True)
        if server.url.rpartition(":")[0] not in LOOPBACK_URLS:
            print("warning  the API is plain HTTP: reach it through SSH, not the open network")
    return server
