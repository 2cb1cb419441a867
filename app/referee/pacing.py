"""The market's clock while a referee run goes: it stands while the engine polls, and slows
down while the engine or the box falls behind.

The simulator's clock runs at a time scale over wall time, while the engine, SSH and the
hosts' commands run in wall time; on a busy box a wall second of SSH costs its scale in market
seconds, the engine notices its hosts' events late in market time, and a score measures the
box. Every `TICK_S` wall seconds the governor looks at two things:

- the lag (app/referee/lag.py): events noticed since its last look, and events still waiting
  to be noticed (their age), against half the run's lag bound;
- what one SSH session with a host cost in market time (its wall length, handshake to close,
  times the scale in force), against `SSH_BOUND_S`.

Besides, the clock is beaten from the engine's own event loop every `BEAT_S` and stands still
once `BEAT_CAP_S` passed without a beat (`SimClock.hold_after`): a box that gives the engine's
process no CPU for a while costs the market `BEAT_CAP_S` of its time, not the while. And each
poll holds the clock (`run_held`; the client holds it too while a call to the market is out):
beats do not count meanwhile, so a poll that takes a loaded wall second of CPU, ledger and
calls costs the market at most `BEAT_CAP_S` of its time.

When either look is over, the market's scale drops (by `SLOW`, never under the nominal scale over
`MAX_SLOWDOWN`); when both were well under, it climbs back (by `SPEED_UP`, never over the
nominal scale). The clock bends and never jumps (`SimClock.set_scale`); the engine reads that
same clock (`Session.open(market_clock=...)`), so its waits follow it. See docs/referee.md,
"Time".
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..engine.rounds import rounds
from ..engine.supervisor import Outcome, Supervisor
from ..sim.clock import SimClock
from ..sim.server import SimServer
from .lag import Notices, host_events, judge, lag_figures, lags, noticed_at, still_visible

T = TypeVar("T")

TICK_S = 0.25  # wall seconds between two looks
BEAT_S = 0.005  # wall seconds between two beats of the clock from the engine's loop
BEAT_CAP_S = 0.025  # wall seconds the market runs on without a beat
SLOW = 0.6  # the scale's factor when the engine is late
SPEED_UP = 1.1  # the scale's factor when it keeps up
MAX_SLOWDOWN = 64.0  # the scale never drops under nominal / this
# market seconds one SSH session (connect, one command, close) may cost: a real host answers
# in seconds; at 600x an idle loopback session of 20-40 ms costs 12-24, a loaded one 60-180
SSH_BOUND_S = 60.0


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


def worst_recent(
    truth: Mapping[str, Any], notices: Notices, start: float, now: float, since: float
) -> float:
    """The largest lag among events noticed from `since` and events still waiting (their age)."""
    rows = {int(r["id"]): r for r in truth.get("instances", [])}
    worst = 0.0
    for e in host_events(truth, start, now):
        seen = noticed_at(e, notices)
        if seen is None:
            if still_visible(e, rows.get(e.instance_id)):
                worst = max(worst, now - e.at)
        elif seen >= since:
            worst = max(worst, seen - e.at)
    return worst


@dataclass
class Governor:
    clock: SimClock
    bound_s: float
    read_truth: Callable[[], Awaitable[Mapping[str, Any]]]
    notices: Callable[[], Notices]
    start: float
    ssh_walls: Callable[[], list[float]] = list  # wall seconds of SSH sessions since last asked
    lowest: float = field(init=False)
    wall: Callable[[], float] = time.monotonic
    wall0: float = field(init=False)
    market0: float = field(init=False)
    slowdowns: int = 0
    notices_final: Notices = field(default_factory=lambda: Notices({}, {}))
    final: dict[str, Any] = field(default_factory=dict)  # figures() as the run ended

    def __post_init__(self) -> None:
        self.lowest = self.clock.time_scale
        self.market0, self.wall0 = self.clock.now(), self.wall()

    def step(self, worst: float, ssh_wall: float = 0.0) -> None:
        """Change the scale after a look whose worst lag was `worst` market seconds and whose
        slowest SSH session took `ssh_wall` wall seconds."""
        nominal = self.clock.nominal_scale
        scale = self.clock.time_scale
        ssh = ssh_wall * scale
        if worst > self.bound_s / 2 or ssh > SSH_BOUND_S:
            new = max(nominal / MAX_SLOWDOWN, scale * SLOW)
            self.slowdowns += new < scale
        elif worst < self.bound_s / 4 and ssh < SSH_BOUND_S / 2:
            new = min(nominal, scale * SPEED_UP)
        else:
            return
        if new != scale:
            self.clock.set_scale(new)
            self.lowest = min(self.lowest, new)

    async def run(self) -> None:
        """Look and steer until cancelled."""
        since = self.clock.now()
        while True:
            await asyncio.sleep(TICK_S)
            truth = await self.read_truth()
            now = self.clock.now()
            lag = worst_recent(truth, self.notices(), self.start, now, since)
            self.step(lag, max(self.ssh_walls(), default=0.0))
            since = now

    def figures(self) -> dict[str, Any]:
        """The run's time scales: asked, lowest used, and market over wall time overall."""
        wall = max(self.wall() - self.wall0, 1e-9)
        return {
            "nominal": self.clock.nominal_scale,
            "lowest": round(self.lowest, 1),
            "effective": round((self.clock.now() - self.market0) / wall, 1),
            "slowdowns": self.slowdowns,
        }


@contextlib.asynccontextmanager
async def governed(
    sim: SimServer, sup: Supervisor, start: float, bound_s: float
) -> AsyncIterator[Governor]:
    """The governor steering `sim`'s clock while the body runs the engine."""
    gov = Governor(
        sim.market.clock,
        bound_s,
        lambda: sim.acall(sim.market.truth),
        lambda: notices_of(sup),
        start,
        lambda: _drain(sim.ssh.session_walls if sim.ssh is not None else deque()),
    )
    clock = sim.market.clock
    clock.hold_after(BEAT_CAP_S)
    tasks = [asyncio.create_task(gov.run()), asyncio.create_task(_beat(clock))]
    try:
        yield gov
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        clock.hold_after(math.inf)
        gov.notices_final = notices_of(sup)
        gov.final = gov.figures()


async def _beat(clock: SimClock) -> None:
    while True:
        clock.beat()
        await asyncio.sleep(BEAT_S)


async def run_until(run: Awaitable[Outcome], clock: SimClock, deadline: float) -> tuple[str, float]:
    """Await a campaign's run, cancelled at market time `deadline`; (why it ended, when)."""
    task = asyncio.ensure_future(run)
    try:
        # the deadline is market time and the clock's scale may change: wait in wall slices
        while not task.done() and clock.now() < deadline:
            wall = (deadline - clock.now()) / clock.time_scale
            await asyncio.wait({task}, timeout=min(max(wall, 0.0), 1.0))
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


class _HeldPolls:
    """The supervisor's polls, each with the market's clock held: the market stands while the
    engine looks at it and decides (its own CPU, its ledger, its calls), and runs while the
    engine waits for its next poll."""

    def __init__(self, sup: Supervisor, clock: SimClock) -> None:
        self.sup, self.clock = sup, clock

    async def poll_once(self) -> object:
        with self.clock.held():
            return await self.sup.poll_once()

    def poll_wait(self, cap: float, floor: float) -> float:
        return self.sup.poll_wait(cap, floor)


async def run_held(sup: Supervisor, clock: SimClock) -> Outcome:
    """`Supervisor.run`, each poll with `clock` held (`_HeldPolls`)."""
    await rounds(_HeldPolls(sup, clock), lambda: sup.finished is not None)
    assert sup.finished is not None
    return sup.finished


def _drain(walls: deque[float]) -> list[float]:
    """Take what the sim's thread appended (a deque's popleft is safe across threads)."""
    out = []
    while walls:
        out.append(walls.popleft())
    return out


def timing(gov: Governor, truth: Mapping[str, Any], finish: float) -> dict[str, Any]:
    """A run's `lag_s`, `valid`, `why` and `time_scale` (what the governor made of it)."""
    lag_s = lag_figures(lags(truth, gov.notices_final, gov.start, finish))
    valid, why = judge(lag_s, gov.bound_s)
    out: dict[str, Any] = {"lag_s": lag_s, "valid": valid, "time_scale": gov.final or gov.figures()}
    if why is not None:
        out["why"] = why
    return out


def rerun_if_late(
    task: T, run_once: Callable[[T], dict[str, Any]], slower: Callable[[T], T]
) -> dict[str, Any]:
    """`run_once(task)`; if its lag made it invalid, once more as `slower(task)`, which then
    carries `rerun` (why the first was set aside). Invalid twice: the second, still invalid."""
    first = run_once(task)
    if first.get("valid", True):
        return first
    second = run_once(slower(task))
    second["rerun"] = {"why": first.get("why"), "time_scale": first.get("time_scale")}
    return second
