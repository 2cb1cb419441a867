"""The one way the engine talks to a rented host: SSH and SFTP on a pinned connection, with a bound
on concurrent sessions and market-time deadlines turned into wall time. A host answering with
another key than the pinned one is distrusted here, once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import asyncssh

from ...core.models import SSHRoute
from ...ledger import EventKind
from ...market.errors import REFUSALS
from ...market.protocol import Market, wall_seconds
from ..attempt import Attempt
from ..journal import Journal
from ..updates import KeyChanged, Set, WentSilent
from .ssh import (
    HostKeyChanged,
    NoAnswer,
    RunResult,
    SSHFailure,
    SSHRunner,
    loopback_handshakes,
)

T = TypeVar("T")

# The wall-time floor of SSH waits: network and CPU latency do not speed up with a simulator's
# clock, and a fixed wall second was 10 market minutes at 600x. The floor is a few times the
# slowest recent connect that answered (loopback handshakes first), between IO_FLOOR_MIN_S and
# IO_FLOOR_MAX_S (or the policy's `io_floor_wall_s`). Job sessions, heartbeats and transfers
# connect with the ceiling, which follows load too (a fixed second made a proven host look dead
# on a loaded box), up to IO_CEILING_CAP_S. At time scale 1, 20 s is over all of these.
IO_FLOOR_MAX_S = 1.0
IO_FLOOR_MIN_S = 0.2
IO_FLOOR_TIMES = 5.0
IO_FLOOR_MEASURED = 3  # connects that answered before the floor follows them
IO_CEILING_CAP_S = 6.0  # wall seconds: what a loaded machine may stretch the ceiling to
REMEASURE_EVERY_S = 2.0  # wall seconds between loopback measurements after failed sessions
CONNECT_TIMEOUT_S = 20.0  # market seconds a preflight's connect waits for an answer


def routed(a: Attempt) -> tuple[str, int]:
    """The host's SSH route, or SSHFailure: an instance that stopped (an outbid, say) is
    listed without one, and a look under way when that is seen finds no host to reach."""
    if a.ssh_host is None or a.ssh_port is None:
        raise SSHFailure(f"i:{a.instance_id} has no SSH route now (the market lists none)")
    return a.ssh_host, a.ssh_port


class HostLink:
    def __init__(
        self,
        ssh: SSHRunner,
        market: Market,
        journal: Journal,
        max_parallel: int = 8,
        policy_io_floor_s: float = 0.0,
    ) -> None:
        self.ssh = ssh
        self.market = market
        self.journal = journal
        self.slots = asyncio.Semaphore(max_parallel)
        # the floor's ceiling: the policy's `io_floor_wall_s` where that is higher
        self.io_floor_max = max(IO_FLOOR_MAX_S, policy_io_floor_s)
        self.measuring = False  # calibrated: the clock runs fast enough for the floor to matter
        self.measured_at = float("-inf")  # wall clock of the latest loopback measurement
        self.keyed: set[int] = set()  # instances whose key attach was tried this session
        self.routes_noted: dict[int, SSHRoute] = {}  # the route the ledger last names, per host
        self.unanswered: dict[int, int] = {}  # first contacts in a row no route answered

    async def calibrate(self) -> None:
        """Where the market's clock runs fast (the simulator), measure a few loopback SSH
        handshakes, so the floor follows this machine from the first host on."""
        if CONNECT_TIMEOUT_S / max(self.market.time_scale, 1e-9) >= self.io_floor_max:
            return  # the real market: 20 s of connect timeout is over any floor
        self.measuring = True
        await self._measure(IO_FLOOR_MEASURED)

    async def _measure(self, n: int) -> None:
        self.measured_at = self.ssh.wall_clock()
        async with self.ssh.hold(None):
            walls = await loopback_handshakes(
                self.ssh.key, n, IO_CEILING_CAP_S, self.ssh.wall_clock
            )
        self.ssh.connect_walls.extend(walls)

    async def _remeasure(self) -> None:
        """After a session that got no answer: one loopback handshake, at most every few wall
        seconds (a dead host fails every look; the load is worth one measurement a while)."""
        if self.measuring and self.ssh.wall_clock() - self.measured_at >= REMEASURE_EVERY_S:
            await self._measure(1)

    def io_floor(self) -> float:
        """Wall seconds an SSH wait does not fall under, from the connects measured so far."""
        walls = self.ssh.connect_walls
        if len(walls) < IO_FLOOR_MEASURED:
            return self.io_floor_max
        # under the ceiling, which passes the cap only where this machine's load says so
        return min(self.io_ceiling(), max(IO_FLOOR_MIN_S, IO_FLOOR_TIMES * max(walls)))

    def first_contact_floor(self, unanswered: int) -> float:
        """The floor of a first contact's connect after `unanswered` tries in a row: doubled for
        each, up to IO_CEILING_CAP_S. A loaded box's host may take longer than any multiple of
        the loopback's handshake, and healthy hosts were called dead at a fixed floor."""
        floor = self.io_floor()
        return min(floor * 2.0**unanswered, max(floor, IO_CEILING_CAP_S))

    def io_ceiling(self) -> float:
        """Wall seconds a session with a proven host waits to connect: the floor's ceiling, or
        a few times the slowest recent connect where this machine's load makes that longer."""
        slowest = max(self.ssh.connect_walls, default=0.0)
        return max(self.io_floor_max, min(IO_CEILING_CAP_S, IO_FLOOR_TIMES * slowest))

    def wall(self, market_seconds: float, floor: float) -> float:
        """Wall seconds for a span of market time (the sim runs its clock faster)."""
        return wall_seconds(market_seconds, self.market.time_scale, floor)

    async def run(
        self, a: Attempt, command: str, stdin: bytes | None = None, timeout: float = 60
    ) -> RunResult:
        """One command on a proven host (market-seconds timeout). A command that ran to its exit
        status is an answer; a session that hung or was cut is not, whoever called."""
        routed(a)
        async with self.slots, self._distrust_on_key_change(a):
            ceiling = self.io_ceiling()
            try:  # the whole command's floor: its connect's, and 4 s to run (5 s unloaded)
                res = await self._ssh_run(
                    a, command, stdin, self.wall(timeout, 4.0 + ceiling), ceiling
                )
            except HostKeyChanged:
                raise  # an answer, from another host: distrusted, not silent
            except SSHFailure:
                self.journal.writer.emit(WentSilent(a, self.market.now()))
                await self._remeasure()
                raise
            if res.exit_status is None:
                self.journal.writer.emit(WentSilent(a, self.market.now()))  # cut before its end
            else:
                self.journal.writer.emit(Set(a, {"silent_since": None}))
            return res

    async def probe(
        self, a: Attempt, script: bytes, timeout_wall: float, command: str = "python3 -"
    ) -> RunResult:
        """The preflight: a first contact, so a changed key is the preflight's own verdict
        (raised to the caller, not a distrust of a host never trusted)."""
        routed(a)
        async with self.slots:
            unanswered = self.unanswered.get(a.instance_id, 0)
            try:
                res = await self._ssh_run(
                    a, command, script, timeout_wall, self.first_contact_floor(unanswered)
                )
            except SSHFailure as exc:
                if isinstance(exc, NoAnswer):
                    self.unanswered[a.instance_id] = unanswered + 1
                # a host that did not answer may be a machine too loaded to answer in time:
                # the floor learns from connects that answered only, so measure the load
                if self.measuring:
                    await self._measure(1)
                raise
            self.unanswered.pop(a.instance_id, None)
            return res

    async def key_on(self, a: Attempt) -> None:
        """Vast's account keys reach new instances only (vast-ai/docs `connect/ssh.mdx`): an
        instance this session did not create gets rentwatch's key attached before its first
        session, checked against its key list. Once a session."""
        if a.offer is not None or a.instance_id in self.keyed:
            return
        self.keyed.add(a.instance_id)
        mine = self.ssh.public_key.split()[1:2]
        try:
            await self.market.attach_ssh_key(a.instance_id, self.ssh.public_key)
            took = any(
                k.split()[1:2] == mine for k in await self.market.instance_ssh_keys(a.instance_id)
            )
        except REFUSALS as exc:
            took, why = False, f"{exc}"
        else:
            why = "" if took else "the instance's key list does not show it"
        self.journal.fact(
            EventKind.NOTE,
            a,
            ok=took,
            reason="rentwatch's SSH key attached to the instance"
            + ("" if took else f": did not take ({why[:200]})"),
            detail={"class": "ssh_key_attach"},
        )

    async def _ssh_run(
        self, a: Attempt, command: str, stdin: bytes | None, timeout_wall: float, floor: float
    ) -> RunResult:
        async with self._session(a) as (host, port):
            return await self.ssh.run(
                a.instance_id,
                host,
                port,
                command,
                stdin=stdin,
                timeout=timeout_wall,
                connect_timeout=self.wall(CONNECT_TIMEOUT_S, floor),
            )

    @contextlib.asynccontextmanager
    async def _session(self, a: Attempt) -> AsyncIterator[tuple[str, int]]:
        """One session's route: only the session itself holds a stepped market clock."""
        host, port = routed(a)  # again: the route may have gone while a slot was awaited
        await self.key_on(a)
        try:
            async with self.ssh.hold(a.instance_id):
                yield host, port
        finally:
            self._note_route(a)

    def _note_route(self, a: Attempt) -> None:
        """The ledger says which route (direct or proxy) each host was reached by, and when
        that changes (the runner falls back from a route that stopped answering)."""
        route = self.ssh.route_used.get(a.instance_id)
        if route is None or self.routes_noted.get(a.instance_id) == route:
            return
        self.routes_noted[a.instance_id] = route
        where = f"{route.host}:{route.port}"
        self.journal.fact(
            EventKind.SSH_ROUTE,
            a,
            reason=f"reached by its {route.kind} route {where}",
            detail={"kind": route.kind, "where": where},
        )

    async def on_connection(
        self, a: Attempt, work: Callable[[asyncssh.SSHClientConnection], Awaitable[T]]
    ) -> T:
        """SFTP work on the host's held connection, within the concurrency bound and a
        deadline."""
        routed(a)
        async with self.slots, self._distrust_on_key_change(a):
            connect_s = self.wall(CONNECT_TIMEOUT_S, self.io_ceiling())
            try:
                async with (
                    self._session(a) as (host, port),
                    self.ssh.connected(a.instance_id, host, port, connect_s) as conn,
                ):
                    return await asyncio.wait_for(work(conn), self.wall(600, 30))
            except SSHFailure:
                await self._remeasure()
                raise

    @contextlib.asynccontextmanager
    async def _distrust_on_key_change(self, a: Attempt) -> AsyncIterator[None]:
        try:
            yield
        except HostKeyChanged as exc:
            self.journal.writer.emit(KeyChanged(a, str(exc)))
            raise
