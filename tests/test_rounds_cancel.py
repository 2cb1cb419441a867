"""The poll loop ends when its task is cancelled even if a poll swallowed the cancel (Python
3.11's `asyncio.wait_for` drops one that lands as its inner call finishes). A headless run
whose market went down cancels the loop and waits for it: a lost cancel there was a run that
never exited (`test_a_market_lost_mid_run_is_one_line_and_exit_4` timed out under load)."""

from __future__ import annotations

import asyncio

import pytest
from rentwatch.engine.rentals import Writer
from rentwatch.engine.rounds import rounds


class Swallower:
    """A poll that loses every cancel that reaches it, as a wait_for can."""

    def __init__(self) -> None:
        self.polls = 0
        self.writer = Writer(None)  # type: ignore[arg-type]  (nothing emits here)

    async def poll_once(self) -> None:
        self.polls += 1
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            pass  # lost

    def poll_wait(self, cap: float, floor: float) -> float:
        return 0.0


def test_a_cancel_a_poll_swallowed_still_ends_the_loop():
    async def main() -> int:
        sup = Swallower()
        task = asyncio.ensure_future(rounds(sup, lambda: False, floor_s=0.01))
        while sup.polls < 3:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 2.0)
        return sup.polls

    assert asyncio.run(main()) < 10
