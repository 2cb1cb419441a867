"""The market's clock: wall time since the market started, times its scale; or a stepped clock that
moves only when told to (app/referee/stepped.py)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import time
from collections.abc import Callable, Iterator

# market time starts at the wall clock; sim time then runs `time_scale` times faster
EPOCH_ORIGIN = float(int(time.time()))

# the hold the current task is inside (`SimClock.held`), so that a wait on the clock lifts
# that task's own hold and no other's
_HOLD: contextvars.ContextVar[int | None] = contextvars.ContextVar("rentwatch_hold", default=None)
_TOKENS = itertools.count(1)


class SimClock:
    """Market time: `origin` plus wall time elapsed since start, times the scale.

    `stepped()` stops the flow; then time moves only by `advance`. A party with an exchange out
    holds the clock (`held`), and a hold older than the stall cap no longer counts (a silent host
    must not stop time for good). Holds and steps come from the engine's thread."""

    def __init__(
        self,
        time_scale: float,
        origin: float = EPOCH_ORIGIN,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.origin = origin
        self._monotonic = monotonic
        self.time_scale = time_scale  # market seconds per wall second (the engine's unit too)
        self._base, self._mono0 = origin, monotonic()
        self.is_stepped = False
        # hold token -> (wall clock when it began, what it waits on: an instance id or None)
        self._holding: dict[int, tuple[float, object]] = {}
        self.ordered = False  # answers go on in the order their exchanges went out
        self._back: dict[int, asyncio.Future[None]] = {}  # came back, waiting for their turn
        # the market seconds the clients' pacing ran on past `now()` through stands (`stand`),
        # and the wall clock when the stand in progress began
        self._stood = 0.0
        self._stand_began: float | None = None

    def now(self) -> float:
        if self.is_stepped:
            return self._base
        return self._base + (self._monotonic() - self._mono0) * self.time_scale

    def stepped(self, at: float | None = None) -> None:
        """Stand still at `at` (default: now) and move only by `advance` from then on."""
        self._base = self.now() if at is None else at
        self.is_stepped = True

    def stand(self) -> None:
        """Stand still until `flowing`: a test's own wall-time step costs the market nothing.
        The clients' pacing runs on meanwhile (`pacing_now`)."""
        self.stepped()
        self._stand_began = self._monotonic()

    def flowing(self) -> None:
        """Run on with wall time from where a stepped clock stands (tests that stop the
        market around a wall-time step of their own)."""
        self._stood, self._stand_began = self.pacing_now() - self.now(), None
        self._base, self._mono0 = self.now(), self._monotonic()
        self.is_stepped = False

    def pacing_now(self) -> float:
        """The moment the market paces a client's call at: `now()`, run on at the scale through
        every stand. A stand stops what the market does, not the clients that call it: one
        that keeps to the intervals in its own time is not refused for good because the
        market's time stood, and one that hammers still is."""
        began = self._stand_began
        running = 0.0 if began is None else (self._monotonic() - began) * self.time_scale
        return self.now() + self._stood + running

    def advance(self, seconds: float) -> None:
        """Move the market forward (a stepped clock's one way to move; tests' jumps too)."""
        if seconds > 0:
            self._base += seconds

    def busy(self, stall_cap_s: float, silent: Callable[[object], bool] = lambda _: False) -> bool:
        """Whether a hold younger than `stall_cap_s` wall seconds is out, one whose subject
        is `silent` (a host the stepper knows will never answer) aside."""
        young = self._monotonic() - stall_cap_s
        return any(
            began > young and not silent(subject) for began, subject in self._holding.values()
        )

    @property
    def holds(self) -> int:
        return len(self._holding)

    def held(self, subject: object = None) -> Hold:
        """An exchange with the market or a host (`subject`: its instance id) is out: a stepped
        clock does not move; on an ordering loop the holder goes on only in its turn."""
        return Hold(self, subject)

    def order_answers(self) -> None:
        """From now on, exchanges that come back go on one at a time, in the order they went
        out (`release_next`, called by the loop whenever it has nothing else to run)."""
        self.ordered = True

    def release_next(
        self, stall_cap_s: float, silent: Callable[[object], bool] = lambda _: False
    ) -> bool:
        """Let the first exchange that came back go on, if none that went out before it is still
        out. True if one did. Answers go on in the order their exchanges went out, never in the
        order the box delivered them, so the engine does the same on any box."""
        if not self._back:
            return False
        first = min(self._back)
        young = self._monotonic() - stall_cap_s
        if any(
            token < first and token not in self._back and began > young and not silent(subject)
            for token, (began, subject) in self._holding.items()
        ):
            return False
        turn = self._back.pop(first)
        if not turn.done():
            turn.set_result(None)
        return True

    @contextlib.contextmanager
    def waited_on(self) -> Iterator[None]:
        """Inside `held`, the holder waits on the clock itself (a call paced in market
        seconds): its hold lifts meanwhile, or the wait would never end."""
        token = _HOLD.get()
        lifted = self._holding.pop(token, None) if token is not None else None
        try:
            yield
        finally:
            if lifted is not None and token is not None:
                self._holding[token] = (self._monotonic(), lifted[1])


class Hold:
    """One exchange out (`SimClock.held`). `async with` on an ordering clock also lets its holder go
    on after the exchange came back only in its turn (`SimClock.release_next`). Only the
    outermost exchange of a task waits for a turn."""

    def __init__(self, clock: SimClock, subject: object) -> None:
        self.clock, self.subject = clock, subject
        self.token = 0  # drawn as it is entered: the order exchanges went out
        self.outermost = False  # the task's outermost exchange: the one that waits for its turn
        self.restore: contextvars.Token[int | None] | None = None  # the task's hold before

    def __enter__(self) -> None:
        self.token = next(_TOKENS)
        self.clock._holding[self.token] = (self.clock._monotonic(), self.subject)
        self.outermost = _HOLD.get() is None
        self.restore = _HOLD.set(self.token)

    def __exit__(self, *exc: object) -> None:
        if self.restore is not None:
            _HOLD.reset(self.restore)
            self.clock._holding.pop(self.token, None)

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> None:
        back = self.clock._back
        try:
            # a cancelled exchange was ended by its holder (its timeout, in market time)
            cancelled = kind is not None and issubclass(kind, asyncio.CancelledError)
            if self.clock.ordered and self.outermost and not cancelled:
                # it came back: it waits until `release_next` lets it go on
                back[self.token] = asyncio.get_running_loop().create_future()
                await back[self.token]
        finally:
            back.pop(self.token, None)
            self.__exit__()
