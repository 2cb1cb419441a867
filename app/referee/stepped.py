"""Market time for a referee run that does not depend on the box: the engine's event loop runs on
the market's clock, which moves only when every party waits on it.

On `SteppedLoop` the loop's time is market time over the scale, so every engine wait is a wait on
the market's clock. When nothing is ready and no exchange is out, the clock jumps to the earliest
wait's end and the hosts catch up (`SSHHosts.settle`); an exchange out longer than `STALL_CAP_S`
stops holding it. Answers go on in the order their exchanges went out (`SimClock.release_next`),
so the run is the same on any box (docs/referee.md, "Time")."""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ..sim.clock import SimClock
from ..sim.server import SimServer

T = TypeVar("T")

# wall seconds an exchange holds the clock before it counts as stalled: far past what a
# loaded box takes to answer (a session with a host spawns its command for real), or the clock
# would move under an answer on its way
STALL_CAP_S = 30.0
SLICE_S = 0.005  # wall seconds between two looks while an exchange is out
# wall seconds a job whose work was delivered has to write its exit code (as STALL_CAP_S;
# under `SimServer.call`'s own limit)
EXIT_WAIT_S = 20.0
# the referee's market day starts here (2026-01-21 00:00 UTC, the day `scenario describe`
# measures): the same run starts at the same market hour on any box, on any day
ORIGIN = 1768953600.0
# and its instance ids from here (a run has a ledger of its own: no id to keep apart from
# another run's), since hosts draw some of their ways from their instance's id
ID_BASE = 20_000_000


def stepped_clock(origin: float = ORIGIN) -> SimClock:
    """A market clock that moves only when stepped, from `origin`, at scale 1."""
    clock = SimClock(1.0, origin=origin)
    clock.stepped(origin)
    return clock


class SteppedSelector(selectors.DefaultSelector):
    """The loop's own selector, but a wait with nothing ready and nothing out moves the
    market's clock to the wait's end instead of sleeping through it."""

    def __init__(
        self,
        clock: SimClock,
        settle: Callable[[], None],
        now: Callable[[], float],
        silent: Callable[[object], bool] = lambda _: False,
        stall_cap_s: float = STALL_CAP_S,
        max_pace: float | None = None,
        wall: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.clock, self.settle, self.now, self.silent = clock, settle, now, silent
        self.stall_cap_s = stall_cap_s
        self.steps = 0
        # with a pace cap, a jump of J market seconds takes J / max_pace wall seconds at least
        # (counted from the last jump), so a person can watch a run go; nothing else changes
        self.max_pace, self.wall = max_pace, wall
        self.last_step_wall = wall()
        # set (from any thread): the market stands; the loop waits in wall time, awake to any
        # answer or call, and steps again once it is cleared (a test driving a dashboard holds
        # the market still between its keys, however slowly a loaded box takes them)
        self.standing = False

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return super().select(0)  # callbacks are ready: no waiting, no step
        while True:
            events = super().select(0)
            if events:
                return events
            # nothing to run: the first exchange back goes on, alone, in its turn
            if self.clock.release_next(self.stall_cap_s, self.silent):
                return []
            if timeout is not None and not self.clock.busy(self.stall_cap_s, self.silent):
                pause = SLICE_S * 20 if self.standing else self.pause_for(timeout)
                if pause > 0:  # the pace cap: wait in wall time, still awake to any answer
                    events = super().select(min(pause, SLICE_S * 20))
                    if events:
                        return events
                    continue
                self.step_to(self.now() + timeout)
                return []
            events = super().select(SLICE_S if timeout is None else min(SLICE_S, timeout))
            if events:
                return events

    def pause_for(self, timeout: float) -> float:
        """Wall seconds to wait so a jump of `timeout` keeps within the pace cap; 0 without one."""
        if self.max_pace is None:
            return 0.0
        jump_s = timeout * self.clock.time_scale
        return self.last_step_wall + jump_s / self.max_pace - self.wall()

    def step_to(self, loop_time: float) -> None:
        """Every party waits: the market's clock jumps to `loop_time` (the loop's units), a
        hair past it so that the wait that ends there is due, and its hosts catch up."""
        target = self.clock.origin + loop_time * self.clock.time_scale + 1e-6
        self.clock.advance(target - self.clock.now())
        self.steps += 1
        self.last_step_wall = self.wall()
        self.settle()


class SteppedLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is `clock`'s market time over its scale, stepped by its selector."""

    def __init__(
        self,
        clock: SimClock,
        settle: Callable[[], None],
        silent: Callable[[object], bool] = lambda _: False,
        max_pace: float | None = None,
    ) -> None:
        self.market_clock = clock
        self.stepper = SteppedSelector(clock, settle, self.time, silent, max_pace=max_pace)
        super().__init__(self.stepper)
        clock.order_answers()

    def close(self) -> None:
        self.market_clock.ordered = False  # no loop left to hand answers on
        super().close()

    def time(self) -> float:
        # from the clock's origin: at epoch seconds a float has no room for the loop's
        # resolution, and a timer due now would be neither due nor in the future
        clock = self.market_clock
        return (clock.now() - clock.origin) / clock.time_scale


def run_stepped(sim: SimServer, main: Coroutine[Any, Any, T], max_pace: float | None = None) -> T:
    """`asyncio.run(main)` on a loop stepped with `sim`'s clock (which must be stepped);
    `max_pace`: the most market seconds per wall second (None: as fast as the box goes)."""
    with asyncio.Runner(loop_factory=lambda: stepped_loop(sim, max_pace)) as runner:
        return runner.run(main)


def stepped_loop(sim: SimServer, max_pace: float | None = None) -> SteppedLoop:
    """An event loop stepped with `sim`'s clock (which must be stepped), its hosts settled at
    each step."""
    clock = sim.market.clock
    if not clock.is_stepped or not sim.stepped:
        raise ValueError("a stepped loop needs a simulator on a stepped clock")

    def settle() -> None:
        if sim.ssh is not None:
            sim.call(sim.ssh.settle, EXIT_WAIT_S)

    def silent(subject: object) -> bool:
        """A session with a host the simulator will never answer (its sshd accepts and
        says nothing, or its sessions hang): waiting on it holds no time."""
        inst = sim.market.instances.get(subject) if isinstance(subject, int) else None
        if inst is None or sim.ssh is None:
            return False
        return inst.machine.behaviour == "ssh_dead" or inst.id in sim.ssh.hung

    return SteppedLoop(clock, settle, silent, max_pace)
