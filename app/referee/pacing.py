"""A referee run's time: the engine on the stepped market clock, its market-time deadline, and its
lag, whether that stayed within the bound, and how fast the market ran (docs/referee.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engine.supervisor import Outcome, Supervisor
from ..sim.clock import SimClock
from .lag import Notices, judge, lag_figures, lags


def notices_of(sup: Supervisor) -> Notices:
    """The engine's notices so far: every attempt's phase moves, every job it saw finish."""
    return Notices(
        moves={
            a.instance_id: tuple((t.at, t.after) for t in a.life.history)
            for a in sup.attempts.values()
        },
        jobs_done={
            (j.name, j.instance_id): j.finished_at
            for j in sup.jobs.jobs
            if j.status == "done" and j.instance_id is not None and j.finished_at is not None
        },
    )


@dataclass
class Pace:
    """One run's clock: where it started, the engine's notices at its end, the market's pace."""

    clock: SimClock
    bound_s: float
    start: float
    wall: Callable[[], float] = time.monotonic  # the box's own clock: figures only
    wall0: float = field(init=False)
    notices_final: Notices = field(default_factory=lambda: Notices({}, {}))
    final: dict[str, Any] = field(default_factory=dict)  # figures() as the run ended

    def __post_init__(self) -> None:
        self.wall0 = self.wall()

    def figures(self) -> dict[str, Any]:
        """The market seconds that passed per wall second of the box over the run (for
        reading: a stepped market's pace follows the box, its times do not)."""
        wall = max(self.wall() - self.wall0, 1e-9)
        return {"effective": round((self.clock.now() - self.start) / wall, 1)}


@contextlib.asynccontextmanager
async def paced(
    clock: SimClock, sup: Supervisor, start: float, bound_s: float
) -> AsyncIterator[Pace]:
    """The run's pace while the body runs the engine; its notices and figures at the end."""
    pace = Pace(clock, bound_s, start)
    try:
        yield pace
    finally:
        pace.notices_final = notices_of(sup)
        pace.final = pace.figures()


async def run_until(run: Awaitable[Outcome], clock: SimClock, deadline: float) -> tuple[str, float]:
    """Await a campaign's run, cancelled at market time `deadline`; (why it ended, when)."""
    task = asyncio.ensure_future(run)
    try:
        # the deadline is market time, which is the stepped loop's time
        while not task.done() and clock.now() < deadline:
            await asyncio.wait({task}, timeout=max(deadline - clock.now(), 0.0) / clock.time_scale)
    except asyncio.CancelledError:  # ^C: the run ends before the session closes its client
        await _cancel(task)
        raise
    if task.done():
        return task.result().reason, min(clock.now(), deadline)
    await _cancel(task)
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
    return "referee: the market-time deadline passed", deadline


async def _cancel(task: asyncio.Future[Any]) -> None:
    """Cancel until the run has ended (before Python 3.12, asyncio.wait_for can swallow a
    cancel that lands as its inner call completes: the run would go on polling for good)."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)


def timing(gov: Pace, truth: Mapping[str, Any], finish: float) -> dict[str, Any]:
    """A run's `lag_s`, `valid`, `why` and `time_scale`."""
    lag_s = lag_figures(lags(truth, gov.notices_final, gov.start, finish))
    valid, why = judge(lag_s, gov.bound_s)
    out: dict[str, Any] = {"lag_s": lag_s, "valid": valid, "time_scale": gov.final or gov.figures()}
    if why is not None:
        out["why"] = why
    return out
