"""The controller's own accept loop: a listening socket served to aiohttp one connection at a time,
under a cap, with a deadline for each connection's first valid request.

Not asyncio's `create_server`, which holds every connection with no limit or timeout: 250 idle
connections under a 256-descriptor limit left nothing for SSH or the ledger. At the cap the
oldest connection without a valid request is dropped (or the new one); accept errors are written
once per burst; aiohttp's request errors once per `LOG_BURST_S`, without traceback."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import socket
import sys
from collections.abc import Callable
from typing import Any, TextIO

FIRST_REQUEST_S = 5.0  # wall seconds from accept to a connection's first valid request
CAP_SHARE = 4  # at most a quarter of the descriptor limit goes to API connections
CAP_MIN, CAP_MAX = 8, 128
ACCEPT_RETRY_S = 0.5  # wall seconds between tries while accepts fail
LOG_BURST_S = 60.0  # wall seconds between two of aiohttp's request-error lines
# accept errors that mean "not now" (out of descriptors or memory, a peer gone before accept)
TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED}


def default_cap(share: int = CAP_SHARE, lo: int = CAP_MIN, hi: int = CAP_MAX) -> int:
    """Connections allowed at once: 1/`share` of this process's descriptor limit, in [lo, hi]."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return lo
    if soft == resource.RLIM_INFINITY:
        return hi
    return max(lo, min(hi, soft // share))


class _OncePerBurst(logging.Filter):
    """Lets a record through once per `LOG_BURST_S` (the first of a burst says how many were
    held back before it), with no traceback: a client chooses how often it sends garbage."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self.clock = clock
        self.last: float | None = None
        self.held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        if self.last is not None and now - self.last < LOG_BURST_S:
            self.held += 1
            return False
        self.last = now
        why = f": {record.exc_info[1]}" if record.exc_info and record.exc_info[1] else ""
        more = f" ({self.held} more held back)" if self.held else ""
        record.msg, record.args = f"{record.getMessage()}{why}"[:300] + more, ()
        record.exc_info, record.exc_text, self.held = None, None, 0
        return True


def quiet_http_errors(clock: Callable[[], float]) -> None:
    """Install the once-per-burst filter on aiohttp's server logger (once per process)."""
    logger = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _OncePerBurst) for f in logger.filters):
        logger.addFilter(_OncePerBurst(clock))


class Listener:
    """Serves `sock` to `protocol_factory` (aiohttp's server) under the cap and deadline."""

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        *,
        cap: int | None = None,
        first_request_s: float = FIRST_REQUEST_S,
        log: TextIO | None = None,
    ) -> None:
        self.sock = sock
        self.factory = protocol_factory
        self.cap = cap if cap is not None else default_cap()
        self.first_request_s = first_request_s
        self.log = log if log is not None else sys.stderr
        # open connections in accept order; a value is the timer that drops it (None: it
        # has made a valid request)
        self.open: dict[asyncio.BaseTransport, asyncio.TimerHandle | None] = {}
        self.dropped = 0  # connections closed by the cap or the deadline
        self._failing = 0  # accept errors in the current burst
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.sock.listen(128)
        self.sock.setblocking(False)
        self._task = asyncio.get_running_loop().create_task(self._serve())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sock.close()
        for timer in self.open.values():
            if timer is not None:
                timer.cancel()

    def valid(self, transport: Any) -> None:
        timer = self.open.get(transport)
        if timer is not None:
            timer.cancel()
            self.open[transport] = None

    def _say(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            print(line, file=self.log, flush=True)

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                await self._readable()
                continue
            except OSError as exc:
                if exc.errno not in TRANSIENT:
                    raise
                if not self._failing:
                    self._say(
                        f"controller: accepting a connection failed ({exc.strerror}); "
                        "further failures are counted, not written, until accepts work again"
                    )
                self._failing += 1
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            conn.setblocking(False)
            if self._failing:
                self._say(f"controller: accepts work again after {self._failing} failures")
                self._failing = 0
            if not self._admit():
                conn.close()
                self.dropped += 1
                continue
            try:
                transport, _ = await loop.connect_accepted_socket(self.factory, conn)
            except OSError:
                conn.close()
                continue
            self.open[transport] = loop.call_later(self.first_request_s, self._drop, transport)

    async def _readable(self) -> None:
        """Until a connection waits to be accepted. Not `loop.sock_accept`: on CPython 3.11 its
        reader, once the selector has seen a client, still runs after the wait is cancelled in
        that turn (the close), accepts the client and sets the cancelled future's result: an
        InvalidStateError on stderr, the client lost. This reader only ends a wait not yet done,
        and the wait's end takes it off the selector."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        fd = self.sock.fileno()
        loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            loop.remove_reader(fd)

    def _admit(self) -> bool:
        """Room for one more: at the cap, drop the oldest connection still without a valid request,
        or refuse the new one (False) when every open one has made one."""
        for t in [t for t in self.open if t.is_closing()]:
            timer = self.open.pop(t)
            if timer is not None:
                timer.cancel()
        if len(self.open) < self.cap:
            return True
        oldest = next((t for t, timer in self.open.items() if timer is not None), None)
        if oldest is None:
            return False
        self._drop(oldest)
        return True

    def _drop(self, transport: asyncio.BaseTransport) -> None:
        timer = self.open.pop(transport, None)
        if timer is not None:
            timer.cancel()
        if transport.is_closing():
            return
        self.dropped += 1
        if isinstance(transport, asyncio.Transport):
            transport.abort()  # no goodbye owed to a connection that said nothing valid
        else:
            transport.close()
