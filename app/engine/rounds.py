"""The one poll loop: headless and the controller (through `Supervisor.run`) and the
dashboard's engine thread (its own `until`, error handler and snapshot) all poll through it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from .hosts.ssh import loop_time
from .rentals import Writer

# a poll asked for early (`wake`) starts no sooner than this share of the interval after the
# last one began: a burst of webhooks is one early poll, and the market's pacing is kept
EARLY_SHARE = 0.25


class Polled(Protocol):
    writer: Writer

    def poll_once(self) -> Awaitable[object]: ...

    def poll_wait(self, cap: float, floor: float) -> float: ...


async def rounds(
    sup: Polled,
    until: Callable[[], bool],
    after: Callable[[], None] | None = None,
    on_error: Callable[[Exception], None] | None = None,
    cap_s: float = float("inf"),
    monotonic: Callable[[], float] = loop_time,
    floor_s: float = 0.02,
    wake: asyncio.Event | None = None,
) -> None:
    """Poll until `until()`: a poll, then `after`, then the wait to the next poll, start to start,
    `floor_s` to `cap_s`; cut short when `wake` is set, not below `EARLY_SHARE` of the interval.
    A poll's error goes to `on_error`, else is raised. This task is the rentals' one writer while
    it polls: the updates host tasks emit are applied as they arrive, and a person's intents run,
    between two polls (`rentals.Writer`)."""
    async with sup.writer.writing():
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
            interval = sup.poll_wait(cap_s, floor_s)
            wait = max(floor_s, interval - (monotonic() - t0))
            if not await sup.writer.wait(monotonic() + wait, monotonic, wake, until):
                continue
            assert wake is not None
            wake.clear()
            early = EARLY_SHARE * interval - (monotonic() - t0)
            if early > 0:
                await sup.writer.wait(monotonic() + early, monotonic, None, until)


def raise_if_cancelled() -> None:
    """End a loop whose task was asked to stop even when the ask was lost: on Python 3.11
    `asyncio.wait_for` drops a cancel that lands as its inner call finishes."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
