"""The market's clock: wall time since the market started, times its scale; or, for the
referee and the tests that need a market independent of the box, a stepped clock that moves
only when told to (app/referee/stepped.py steps it while every party waits on it)."""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import time
from collections.abc import Callable, Iterator

EPOCH_ORIGIN = float(
    int(time.time())
)  # market time starts at the wall clock; sim time then runs `time_scale` times faster

# the hold the current task is inside (`SimClock.held`), so that a wait on the clock lifts
# that task's own hold and no other's
_HOLD: contextvars.ContextVar[int | None] = contextvars.ContextVar("rentwatch_hold", default=None)
_TOKENS = itertools.count(1)


class SimClock:
    """Market time: `origin` plus wall time elapsed since start, times the scale.

    `stepped()` stops the flow: from then on market time moves only by `advance`. Whoever
    steps it asks `busy()` first: a party that has an exchange out (a call to the market, an
    SSH session with a host) holds the clock meanwhile (`held`), and a hold older than the
    stall cap no longer counts (a host that never answers must not stop time for good).
    Holds and steps come from one thread (the engine's); `now()` is read from any."""

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

    def now(self) -> float:
        if self.is_stepped:
            return self._base
        return self._base + (self._monotonic() - self._mono0) * self.time_scale

    def stepped(self, at: float | None = None) -> None:
        """Stand still at `at` (default: now) and move only by `advance` from then on."""
        self._base = self.now() if at is None else at
        self.is_stepped = True

    def flowing(self) -> None:
        """Run on with wall time from where a stepped clock stands (tests that stop the
        market around a wall-time step of their own)."""
        self._base, self._mono0 = self.now(), self._monotonic()
        self.is_stepped = False

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

    @contextlib.contextmanager
    def held(self, subject: object = None) -> Iterator[None]:
        """An exchange with the market or a host (`subject`: its instance id) is out: a
        stepped clock does not move."""
        token = next(_TOKENS)
        self._holding[token] = (self._monotonic(), subject)
        reset = _HOLD.set(token)
        try:
            yield
        finally:
            _HOLD.reset(reset)
            self._holding.pop(token, None)

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
