"""The client's own pacing: calls of one kind spaced by the market's minimum interval (Vast answers
one too soon with a 429), from the last call out or answer in. In wall seconds on the real
market; on the simulator in its market seconds."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from ..protocol import SharedClock


class Pacer:
    def __init__(
        self,
        min_intervals: dict[str, float],
        scale: Callable[[], float],
        shared: Callable[[], SharedClock | None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_intervals = min_intervals  # market seconds per kind (the caller's own dict)
        self._scale = scale
        self._shared = shared
        self._last_call: dict[str, float] = {}
        self._lock = asyncio.Lock()
        self._monotonic = monotonic

    async def before(self, kind: str) -> None:
        clock = self._shared()
        if clock is not None:
            await self._on_shared(kind, clock)
            return
        interval = self.min_intervals.get(kind, 0.0) / max(self._scale(), 1e-9)
        if interval <= 0:
            return
        async with self._lock:
            wait = self._last_call.get(kind, 0.0) + interval - self._monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last_call[kind] = self._monotonic()

    async def _on_shared(self, kind: str, clock: SharedClock) -> None:
        """In the shared clock's own market seconds: it may run slower than its scale says
        (the referee holds it while the engine polls); the wait lifts that hold."""
        interval = self.min_intervals.get(kind, 0.0)
        if interval <= 0:
            return
        async with self._lock:
            while (wait := self._last_call.get(kind, -math.inf) + interval - clock.now()) > 0:
                with clock.waited_on():
                    await asyncio.sleep(wait / max(clock.time_scale, 1e-9))
            self._last_call[kind] = clock.now()

    def answered(self, kind: str) -> None:
        """The interval runs from the answer too: the market counts it between arrivals, and
        a call sent an interval after the last one went out may still arrive early."""
        if kind in self.min_intervals:
            clock = self._shared()
            at = clock.now() if clock is not None else self._monotonic()
            self._last_call[kind] = max(self._last_call.get(kind, -math.inf), at)
