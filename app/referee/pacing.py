"""A referee run's end: the engine on the stepped market clock until its market-time deadline,
and the facts of the run read from the engine there (docs/referee.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from ..engine.supervisor import Outcome, Supervisor
from ..sim.clock import SimClock
from .score import RunFacts


def facts_of(sup: Supervisor, start: float, finish: float, ended: str) -> RunFacts:
    """The engine's facts of a run, read where it ended (before it releases what it holds):
    every attempt's phase moves, every job it saw finish."""
    return RunFacts(
        start,
        finish,
        sup.campaign.fleet,
        moves={
            a.instance_id: tuple((t.at, t.after) for t in a.life.history)
            for a in sup.attempts.values()
        },
        jobs_total=sup.jobs.total,
        jobs_done={
            (j.name, j.instance_id): j.finished_at
            for j in sup.jobs.jobs
            if j.status == "done" and j.instance_id is not None and j.finished_at is not None
        },
        ended=ended,
    )


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
