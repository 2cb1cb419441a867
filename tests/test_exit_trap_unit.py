"""One exit trap for every way of running the engine (issue 24): `run --headless` installs it
on its event loop, the controller process in its main thread; both act on the first signal
only, note every later one, and leave the previous handlers in place afterwards."""

from __future__ import annotations

import asyncio
import os
import signal

from rentwatch.run.exit_trap import SIGNALS, ExitTrap


def test_in_the_main_thread_the_first_signal_acts_and_a_later_one_is_noted():
    acted: list[int] = []
    said: list[str] = []
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    trap = ExitTrap(acted.append, said.append)
    with trap.installed():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
    assert acted == [signal.SIGTERM]
    assert trap.caught == [signal.SIGTERM, signal.SIGINT]
    assert said == ["signal SIGINT: noted; the run is ending, nothing is cut short"]
    assert trap.exit_code(0) == 128 + signal.SIGTERM and trap.name() == "SIGINT"
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == before


def test_on_an_event_loop_a_signal_once_the_run_is_ending_acts_on_nothing():
    acted: list[int] = []
    said: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        trap = ExitTrap(acted.append, said.append)
        with trap.installed(loop):
            trap.ending = True  # its own release has begun
            os.kill(os.getpid(), signal.SIGHUP)
            await asyncio.sleep(0.05)  # the loop runs its handler
        assert trap.fired and trap.exit_code() == 128 + signal.SIGHUP
        # removed again: the loop no longer handles it (the default SIGHUP would end us)
        assert not loop.remove_signal_handler(signal.SIGHUP)

    asyncio.run(main())
    assert acted == []
    assert said == ["signal SIGHUP: noted; the run is ending, nothing is cut short"]
