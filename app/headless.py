"""`rentwatch run --headless`: the engine without the TUI, with the exit trap.

Any way out (the campaign's end, Ctrl-C, SIGTERM, SIGHUP, an unhandled exception) releases
every instance the controller holds: stopped if it passed its preflight, destroyed if it never
did. Only `--detach` leaves instances running, and says so in the ledger.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from .core.campaign import Campaign
from .core.policy import Policy
from .core.text import clean
from .ledger import EventKind, Ledger
from .session import Session, default_key_path
from .supervisor import Supervisor

__all__ = ["Trapped", "default_key_path", "run_headless"]

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Trapped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


async def run_headless(
    campaign: Campaign,
    policy: Policy,
    market_url: str,
    api_key: str,
    ledger_path: str,
    detach: bool = False,
    key_path: str | None = None,
    on_supervisor: Callable[[Supervisor], None] | None = None,
) -> int:
    t0: list[float] = []

    def log(line: str) -> None:
        now = session.market.now()
        if not t0:
            t0.append(now)
        s = int(now - t0[0])
        # lines quote host and market text (status lines, GPU names): one line, no escapes
        text = clean(line, 2000)
        print(f"[{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}] {text}", flush=True)

    session = Session.open(
        market_url,
        api_key,
        Ledger(ledger_path),
        campaign,
        policy,
        Path(key_path) if key_path else None,
        log=log,
        owns_ledger=True,
    )
    sup = session.sup
    if on_supervisor is not None:  # the controller API (app/service) serves this supervisor
        on_supervisor(sup)
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    caught: list[int] = []

    def on_signal(signum: int) -> None:
        caught.append(signum)
        if main is not None:
            main.cancel()

    for sig in SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    fail_after = int(
        os.environ.get("RENTWATCH_FAIL_AFTER_POLLS", "0") or 0
    )  # test hook: an injected crash
    if fail_after:

        def crash() -> None:
            if sup.polls >= fail_after:
                raise RuntimeError(f"injected failure after {sup.polls} polls")

        sup.listeners.append(crash)
    code = 1
    try:
        try:
            await session.start()
            outcome = await sup.run()
        except asyncio.CancelledError:
            signum = caught[-1] if caught else signal.SIGINT
            raise Trapped(signum) from None
        log(f"end    {outcome.reason}")
        if detach or sup.detach_asked:  # the operator's shutdown through the service API
            await session.detach(
                "--detach: left running on purpose"
                if detach
                else "operator shut the controller down, leaving the fleet running"
            )
            log("detach instances left running on purpose (recorded)")
        else:
            await session.release("rule:campaign_end", f"campaign ended: {outcome.reason}")
        code = 0 if outcome.ok else 3
    except BaseException as exc:  # the trap: whatever happened, nothing keeps billing unwatched
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)  # a second Ctrl-C must not interrupt the release
        why = f"signal {exc}" if isinstance(exc, Trapped) else f"{type(exc).__name__}: {exc}"
        sup.journal.fact(
            EventKind.TRAP,
            None,
            actor="trap",
            reason=f"exit trap fired: {why}",
            detail={"held": [a.instance_id for a in sup.held()]},
        )
        log(f"trap   {why}: releasing {len(sup.held())} held instance(s)")
        try:
            await asyncio.wait_for(session.release("trap", f"exit trap: {why}"), 60)
        except BaseException as exc2:
            log(f"trap   release incomplete: {exc2!r}")
        if not isinstance(exc, Trapped):
            traceback.print_exception(exc, file=sys.stderr)
            code = 1
        else:
            code = 128 + exc.signum
    finally:
        await session.end(f"controller exits with code {code}")
    return code
