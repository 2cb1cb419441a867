"""The exit trap's signals, for `rentwatch run` and the controller process alike: SIGINT, SIGTERM
and SIGHUP end a run; the first acts, later ones are noted and ignored, since cutting a release
short could leave a rental billing unwatched."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Trapped(Exception):
    """The run was ended by a signal; its exit code is 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class ExitTrap:
    """Catches the ending signals while `installed()`: `on_first(signum)` for the first (unless
    the run is already `ending`), a line through `say` for each one after."""

    def __init__(self, on_first: Callable[[int], None], say: Callable[[str], None]) -> None:
        self.on_first = on_first
        self.say = say
        self.caught: list[int] = []
        self.ending = False  # its own release or detach begun: a signal now is only noted

    @property
    def fired(self) -> bool:
        return bool(self.caught)

    def name(self, which: int = -1) -> str:
        return signal.Signals(self.caught[which]).name if self.caught else "none"

    def exit_code(self, which: int = -1) -> int:
        return 128 + self.caught[which]

    def caught_signal(self, signum: int) -> None:
        first = not self.caught and not self.ending
        self.caught.append(signum)
        if first:
            self.on_first(signum)
        else:
            name = signal.Signals(signum).name
            self.say(f"signal {name}: noted; the run is ending, nothing is cut short")

    @contextlib.contextmanager
    def installed(self, loop: asyncio.AbstractEventLoop) -> Iterator[ExitTrap]:
        """On `loop`, removed again afterwards."""
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self.caught_signal, sig)
        try:
            yield self
        finally:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)
