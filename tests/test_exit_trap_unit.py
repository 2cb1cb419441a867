"""One exit trap for every way of running the engine, installed on its event loop: it acts on the
first signal only, notes every later one, and is removed from the loop afterwards."""

from __future__ import annotations

import asyncio
import os
import signal

from rentwatch.run.exit_trap import ExitTrap


def test_the_first_signal_acts_and_a_later_one_is_noted():
    acted: list[int] = []
    said: list[str] = []

    async def main() -> None:
        trap = ExitTrap(acted.append, said.append)
        with trap.installed(asyncio.get_running_loop()):
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(0.05)  # the loop runs its handler
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(0.05)
        assert trap.caught == [signal.SIGTERM, signal.SIGINT]
        assert trap.exit_code(0) == 128 + signal.SIGTERM and trap.name() == "SIGINT"

    asyncio.run(main())
    assert acted == [signal.SIGTERM]
    assert said == ["signal SIGINT: noted; the run is ending, nothing is cut short"]


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
