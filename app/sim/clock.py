"""The market's clock: wall time since the market started, times its scale, bent by the
referee while a run goes (a scale that changes without jumps, a clock that stands while the
engine polls or cannot run: app/referee/pacing.py)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator

EPOCH_ORIGIN = float(
    int(time.time())
)  # market time starts at the wall clock; sim time then runs `time_scale` times faster


class SimClock:
    """Market time: EPOCH_ORIGIN plus wall time elapsed since start, times the scale.

    The scale may change while the market runs (`set_scale`: the referee's governor slows a
    market whose engine falls behind): market time then bends, never jumps, and never runs
    backwards. With `hold_after(cap)` the clock also stands still once `cap` wall seconds
    passed without a `beat()`: the referee beats it from the engine's own event loop, so wall
    time the engine could not run (its own CPU work, a busy box) does not pass in the market;
    and beats do not count while the clock is `held` (the engine's poll, a call to the market
    out), so the market stands while the engine looks at it.
    Read from the sim's thread and the engine's alike, so the whole state is one tuple swapped
    at once."""

    def __init__(
        self,
        time_scale: float,
        origin: float = EPOCH_ORIGIN,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.origin = origin
        self._monotonic = monotonic
        self.nominal_scale = time_scale  # the scale asked for; `time_scale` is the one in force
        # (market time at the last fold, wall clock then, scale since, wall seconds it may run
        # without a beat)
        self._at: tuple[float, float, float, float] = (origin, monotonic(), time_scale, math.inf)
        self._holds = 0  # calls to the market out (`held`), from the thread that beats

    @property
    def time_scale(self) -> float:
        return self._at[2]

    def now(self) -> float:
        base, mono0, scale, cap = self._at
        return base + min(self._monotonic() - mono0, cap) * scale

    def _fold(self, scale: float | None = None, cap: float | None = None) -> None:
        base, mono0, old_scale, old_cap = self._at
        mono = self._monotonic()
        self._at = (
            base + min(mono - mono0, old_cap) * old_scale,
            mono,
            old_scale if scale is None else scale,
            old_cap if cap is None else cap,
        )

    def set_scale(self, time_scale: float) -> None:
        """Run at `time_scale` from now on, continuing from the current market time."""
        if not time_scale > 0:
            raise ValueError(f"time scale must be above 0, got {time_scale!r}")
        self._fold(scale=time_scale)

    def hold_after(self, cap_wall_s: float) -> None:
        """From now on stand still once `cap_wall_s` wall seconds pass without a `beat()`
        (math.inf: never)."""
        if not cap_wall_s > 0:
            raise ValueError(f"cap must be above 0, got {cap_wall_s!r}")
        self._fold(cap=cap_wall_s)

    def beat(self) -> None:
        """Whoever the clock waits for is running: what passed counts (up to the cap), unless
        a call to the market is out (`held`)."""
        if not self._holds:
            self._fold()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """While a call to the market is out, beats do not count: the market's answer costs
        its market time only up to the cap, as a real market answers in a fraction of the
        seconds that a scaled clock would make of a loaded box's wall time."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1

    @contextlib.contextmanager
    def waited_on(self) -> Iterator[None]:
        """Inside `held`, whoever holds waits on the clock itself (a call paced in market
        seconds): the hold lifts meanwhile, or the wait would never end."""
        self._holds -= 1
        try:
            yield
        finally:
            self._holds += 1

    def advance(self, seconds: float) -> None:
        """Jump the market forward (tests and benchmarks)."""
        base, mono0, scale, cap = self._at
        self._at = (base + seconds, mono0, scale, cap)
