"""[AC 1] A verified webhook is a reason to look now: the poll loop, waiting out a long
interval, polls at once when evidence sets its `wake` (no sooner than `EARLY_SHARE` of the
interval after the last poll began), and goes back to its interval after."""

from __future__ import annotations

import asyncio

import pytest
from rentwatch.engine import rounds as rounds_mod
from rentwatch.engine.rentals import Writer
from rentwatch.engine.rounds import rounds

INTERVAL_S = 600.0  # far longer than the test is given: a poll before it was woken early


class Polls:
    def __init__(self) -> None:
        self.polls = 0
        self.changed = asyncio.Event()
        self.writer = Writer(None)  # type: ignore[arg-type]  (nothing emits here)

    async def poll_once(self) -> None:
        self.polls += 1
        self.changed.set()

    def poll_wait(self, cap: float, floor: float) -> float:
        return INTERVAL_S


async def _next_poll(sup: Polls, timeout: float) -> None:
    sup.changed.clear()
    await asyncio.wait_for(sup.changed.wait(), timeout)


def test_a_wake_polls_at_once_then_the_interval_resumes(monkeypatch):
    monkeypatch.setattr(rounds_mod, "EARLY_SHARE", 0.0005)  # 0.3 s of the 600 s interval

    async def main() -> None:
        sup, wake = Polls(), asyncio.Event()
        task = asyncio.ensure_future(rounds(sup, lambda: False, floor_s=0.01, wake=wake))
        try:
            await _next_poll(sup, 10)
            assert sup.polls == 1
            wake.set()
            await _next_poll(sup, 30)  # woken: not the 600 s interval
            assert sup.polls == 2 and not wake.is_set()
            with pytest.raises(TimeoutError):  # nothing woke it: it waits its interval
                await _next_poll(sup, 1.0)
            assert sup.polls == 2
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())


def test_a_wake_during_a_poll_gets_the_next_one_early(monkeypatch):
    """Evidence that arrives while a poll runs may postdate what that poll read: one more."""
    monkeypatch.setattr(rounds_mod, "EARLY_SHARE", 0.0005)

    async def main() -> None:
        wake = asyncio.Event()

        class WokenMidPoll(Polls):
            async def poll_once(self) -> None:
                if self.polls == 0:
                    wake.set()
                await super().poll_once()

        sup = WokenMidPoll()
        task = asyncio.ensure_future(rounds(sup, lambda: False, floor_s=0.01, wake=wake))
        try:
            await _next_poll(sup, 10)
            await _next_poll(sup, 30)
            assert sup.polls == 2
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
