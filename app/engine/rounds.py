"""The one poll loop: headless and the controller (through `Supervisor.run`) and the
dashboard's engine thread (its own `until`, error handler and snapshot) all poll through it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol


class Polled(Protocol):
    def poll_once(self) -> Awaitable[object]: ...

    def poll_wait(self, cap: float, floor: float) -> float: ...


async def rounds(
    sup: Polled,
    until: Callable[[], bool],
    after: Callable[[], None] | None = None,
    on_error: Callable[[Exception], None] | None = None,
    cap_s: float = float("inf"),
    monotonic: Callable[[], float] = time.monotonic,
    floor_s: float = 0.02,
) -> None:
    """Poll until `until()`: a poll, then `after` (a dashboard's snapshot), then the wait to
    the next poll, start to start, `floor_s` to `cap_s` wall seconds. A poll's error goes to
    `on_error` and the loop goes on; without one it is raised."""
    while not until():
        raise_if_cancelled()  # a cancel a poll's wait_for lost still ends the loop
        t0 = monotonic()
        try:
            await sup.poll_once()
        except Exception as exc:
            if on_error is None:
                raise
            on_error(exc)
        raise_if_cancelled()
        if after is not None:
            after()
        if until():
            return
        wait = sup.poll_wait(cap_s, floor_s) - (monotonic() - t0)
        await asyncio.sleep(max(floor_s, wait))


def raise_if_cancelled() -> None:
    """End a loop whose task was asked to stop even when the ask was lost on the way: on
    Python 3.11 `asyncio.wait_for` drops a cancel that lands as its inner call finishes, and
    a host's tend loop then went on forever (a detached run's exit hung on it)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
