"""Running commands and probes on rented hosts over asyncssh, with pinned host keys, hard timeouts
and capped output. The account's API key is never sent. Of an instance's routes (direct, and the
market's proxy) the direct is tried first; a host is unreachable only when every route failed.
A connection is kept per instance and route, each command a session on it (held.py)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from ...core.errors import RentwatchError
from ...core.models import Instance, SSHRoute
from .held import Held, Key, Pool


class SSHFailure(RentwatchError):
    title = "SSH failed"


class HostKeyChanged(SSHFailure):
    title = "host key changed"


class NoAnswer(SSHFailure):
    """No route of the host finished a handshake within the connect timeout."""

    title = "no SSH answer"


@dataclass(frozen=True)
class RunResult:
    exit_status: int | None
    stdout: bytes
    stderr: bytes
    truncated: bool


def load_or_create_key(path: Path) -> asyncssh.SSHKey:
    """rentwatch's own SSH key (ed25519), created 0600 on first use."""
    if path.exists():
        return asyncssh.read_private_key(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key("ssh-ed25519", comment="rentwatch")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.export_private_key())
    return key


# how every connection logs in: as root, with rentwatch's key only (no agent, no ssh config), the
# host key checked by its pin (`SSHRunner.pinned`); keepalives are the runner's (below)
CLIENT_OPTIONS: dict[str, Any] = {
    "username": "root",
    "known_hosts": None,
    "agent_path": None,
    "config": None,
    "keepalive_interval": 0,
}
# A held connection asks the host for a keepalive answer after this many seconds of the loop's
# clock without traffic, and is given up after KEEPALIVE_COUNT_MAX more go unanswered: a host
# that went silent without closing the connection (a dead box, a cut network) is noticed
# before a command is sent into it. As OpenSSH's ServerAliveInterval / ServerAliveCountMax.
KEEPALIVE_S = 30.0
KEEPALIVE_COUNT_MAX = 3


def loop_time() -> float:
    """The engine's wall clock: its running event loop's (the referee's runs on market time)."""
    return asyncio.get_running_loop().time()


class SSHRunner:
    def __init__(
        self,
        key: asyncssh.SSHKey,
        connect_timeout: float = 10.0,
        max_output: int = 1 << 20,
        hold: Callable[[object], AbstractAsyncContextManager[None]] | None = None,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.key = key
        self.wall_clock: Callable[[], float] = loop_time  # times connects (HostLink.io_floor)
        # entered (`async with`) for each session with a host (HostLink), given its instance
        # id: a stepped market clock stands while one is out, and its answer goes on in its
        # turn (app/referee/stepped.py)
        self.hold = hold or (lambda _: contextlib.nullcontext())
        self.connect_timeout = connect_timeout
        self.max_output = max_output
        self.pinned: dict[int, str] = {}  # instance id -> host key fingerprint
        self.routes: dict[int, tuple[SSHRoute, ...]] = {}  # instance id -> its routes, best first
        self.route_used: dict[int, SSHRoute] = {}  # instance id -> the route that worked last
        # wall seconds the latest connects that answered took (HostLink.io_floor reads them);
        # a session on a held connection makes no connect
        self.connect_walls: collections.deque[float] = collections.deque(maxlen=32)
        self.keepalive_s = keepalive_s  # 0: none (a loop whose seconds are market seconds)
        self.pool = Pool()

    def set_routes(self, instance_id: int, instance: Instance) -> None:
        """Tell the runner the usable routes of a parsed `Instance` (those with a host and a
        port). Call it on every poll; routes change when an instance restarts."""
        self.routes[instance_id] = tuple(r for r in instance.ssh_routes if r.host and r.port)
        # a route no longer listed (a restart moved it, a stop took it) holds nothing
        self.pool.forget(instance_id, keep={(r.host, r.port) for r in self.routes[instance_id]})

    def forget(self, instance_id: int) -> None:
        """The instance was stopped, destroyed or let go: its connections close (a session still
        under way on one ends first)."""
        self.pool.forget(instance_id)

    def keep_only(self, instance_ids: Collection[int]) -> None:
        """Close the connections of every instance but these (those still alive)."""
        for iid in self.pool.instances() - set(instance_ids):
            self.pool.forget(iid)

    async def close(self) -> None:
        """Close every connection held and wait for each to be closed (the session's end)."""
        self.keep_only(())
        for conn in self.pool.closing:
            conn.close()
        closing, self.pool.closing = self.pool.closing, []
        async with self.hold(None):  # an exchange with the hosts: a stepped market stands still
            for conn in closing:
                with contextlib.suppress(TimeoutError, OSError, asyncssh.Error):
                    await asyncio.wait_for(conn.wait_closed(), 5)

    def _candidates(self, instance_id: int, host: str, port: int) -> list[SSHRoute]:
        """The given host and port first (the caller's pick), then the instance's other
        routes: direct before proxy, the one that worked last before the rest."""
        known = list(self.routes.get(instance_id, ()))
        given = next(
            (r for r in known if r.host == host and r.port == port), SSHRoute("given", host, port)
        )
        rest = [r for r in known if r != given]
        last = self.route_used.get(instance_id)
        rest.sort(key=lambda r: (r != last, r.kind != "direct"))
        return [given, *rest]

    @contextlib.asynccontextmanager
    async def connected(
        self, instance_id: int, host: str, port: int, connect_timeout: float | None = None
    ) -> AsyncIterator[asyncssh.SSHClientConnection]:
        """The host's held connection (one is made if none is held), for work of the caller's own
        on it (SFTP); work that failed or was cut leaves the connection dropped."""
        held, _ = await self.connection(instance_id, host, port, connect_timeout)
        held.enter()
        try:
            yield held.conn
        except BaseException:
            self.pool.drop(held)
            raise
        finally:
            held.leave()

    async def connection(
        self,
        instance_id: int,
        host: str,
        port: int,
        connect_timeout: float | None = None,
    ) -> tuple[Held, bool]:
        """A connection by the first route that answers, and whether it was held already (no
        handshake); SSHFailure naming every route tried when none did. A changed host key is
        never a reason to try another route.

        The routes race, each a quarter of the connect timeout behind the one before (RFC 8305's
        happy eyeballs), so a host that answers on no route costs one timeout, not one per route.
        A route with a live held connection answers at its turn without a handshake: the given
        route is still tried first."""
        limit = self.connect_timeout if connect_timeout is None else connect_timeout
        routes = self._candidates(instance_id, host, port)
        first = self.pool.reusable(self._key(instance_id, routes[0]))
        if first is not None:
            self.route_used[instance_id] = routes[0]
            return first, True
        failures: dict[int, SSHFailure] = {}

        async def attempt(i: int, route: SSHRoute) -> tuple[SSHRoute, Held, bool]:
            await asyncio.sleep(i * limit / 4)
            key = self._key(instance_id, route)
            held = self.pool.reusable(key)
            if held is not None:
                return route, held, True
            try:
                conn = await self._connect(instance_id, route.host, route.port, limit)
            except SSHFailure as exc:
                failures[i] = exc
                raise
            return route, self.pool.keep(key, conn), False

        tasks = [asyncio.create_task(attempt(i, r)) for i, r in enumerate(routes)]
        won: Held | None = None
        try:
            for done in asyncio.as_completed(tasks):
                try:
                    route, won, reused = await done
                except HostKeyChanged:
                    raise
                except SSHFailure:
                    continue
                self.route_used[instance_id] = route
                return won, reused
        finally:
            for t in tasks:
                t.cancel()
            # a route that connected after the winner is closed, not leaked (a cancel of this
            # call still propagates: gather raises it); a held one stays held
            for got in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(got, tuple) and got[1] is not won and not got[2]:
                    self.pool.drop(got[1])
        said = [f"{routes[i].kind} {failures[i]}" for i in sorted(failures)]
        timed_out = all(isinstance(exc, NoAnswer) for exc in failures.values())
        raise (NoAnswer if timed_out else SSHFailure)("; ".join(said) if len(said) > 1 else said[0])

    @staticmethod
    def _key(instance_id: int, route: SSHRoute) -> Key:
        return (instance_id, route.host, route.port)

    @property
    def public_key(self) -> str:
        return self.key.export_public_key().decode().strip()

    async def _connect(
        self, instance_id: int, host: str | None, port: int, limit: float
    ) -> asyncssh.SSHClientConnection:
        began = self.wall_clock()
        try:
            conn = await asyncio.wait_for(
                asyncssh.connect(
                    host,
                    port,
                    client_keys=[self.key],
                    login_timeout=limit,
                    **{
                        **CLIENT_OPTIONS,
                        "keepalive_interval": self.keepalive_s,
                        "keepalive_count_max": KEEPALIVE_COUNT_MAX,
                    },
                ),
                limit,
            )
        except TimeoutError:
            raise NoAnswer(f"no SSH answer from {host}:{port} in {limit:.3g}s") from None
        except (OSError, asyncssh.Error) as exc:
            raise SSHFailure(f"{host}:{port}: {type(exc).__name__}: {str(exc)[:160]}") from None
        self.connect_walls.append(self.wall_clock() - began)
        server_key = conn.get_server_host_key()
        fp = server_key.get_fingerprint() if server_key else "none"
        known = self.pinned.setdefault(instance_id, fp)
        if known != fp:
            conn.close()
            raise HostKeyChanged(
                f"instance {instance_id}'s host key changed ({known} -> {fp}): refused"
            )
        return conn

    async def run(
        self,
        instance_id: int,
        host: str,
        port: int,
        command: str,
        *,
        stdin: bytes | None = None,
        timeout: float = 60.0,
        connect_timeout: float | None = None,
    ) -> RunResult:
        """Run one command, as a session on the host's held connection (one is made if none is
        held); the command ends within `timeout` seconds. A held connection that fails before
        the host opened the session (it had closed it: a stop, a restart) is replaced once;
        after that, a failure is the command's (it may have run), never sent again."""
        for _ in range(2):
            held, reused = await self.connection(instance_id, host, port, connect_timeout)
            opened = [False]
            held.enter()
            try:
                return await asyncio.wait_for(self._run(held.conn, command, stdin, opened), timeout)
            except TimeoutError:
                self.pool.drop(held)  # a hung session: the connection is not trusted
                raise SSHFailure(f"'{command[:40]}' did not finish within {timeout:g}s") from None
            except (OSError, asyncssh.Error) as exc:
                self.pool.drop(held)
                if reused and not opened[0]:
                    continue
                raise SSHFailure(
                    f"session dropped: {type(exc).__name__}: {str(exc)[:160]}"
                ) from None
            finally:
                held.leave()
        raise AssertionError("unreachable: the second try returns or raises")

    async def _run(
        self,
        conn: asyncssh.SSHClientConnection,
        command: str,
        stdin: bytes | None,
        opened: list[bool],
    ) -> RunResult:
        proc: asyncssh.SSHClientProcess[bytes] = asyncssh.SSHClientProcess()

        def session() -> asyncssh.SSHClientProcess[bytes]:
            opened[0] = True  # the host opened the channel: the command goes out next
            return proc

        # (create_process, with a session factory that says the channel was opened)
        await conn.create_session(session, command, encoding=None)
        await proc.redirect(asyncssh.PIPE, asyncssh.PIPE, asyncssh.PIPE)
        if stdin:
            proc.stdin.write(stdin)
        proc.stdin.write_eof()
        out = bytearray()
        truncated = False
        while True:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                break
            out += chunk
            if len(out) > self.max_output:
                truncated = True
                proc.close()
                break
        err = b""
        if not truncated:
            err = await proc.stderr.read(65536)
            await proc.wait_closed()
        return RunResult(proc.exit_status, bytes(out[: self.max_output]), err, truncated)


class _NoAuth(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False  # no auth: the handshake is what is measured (no session is served)


async def loopback_handshakes(
    key: asyncssh.SSHKey, n: int, timeout: float, clock: Callable[[], float] = time.monotonic
) -> list[float]:
    """Wall seconds of `n` SSH handshakes with a throwaway loopback server: what this machine's load
    costs a connect. Empty when the loopback cannot be used or a handshake times out."""
    walls: list[float] = []
    try:
        server = await asyncssh.listen(
            "127.0.0.1",
            0,
            server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
            server_factory=_NoAuth,
            keepalive_interval=0,
        )
    except (OSError, asyncssh.Error):
        return walls
    port = server.sockets[0].getsockname()[1]
    try:
        for _ in range(n):
            began = clock()
            conn = await asyncio.wait_for(
                asyncssh.connect("127.0.0.1", port, client_keys=[key], **CLIENT_OPTIONS), timeout
            )
            walls.append(clock() - began)
            conn.close()
            await conn.wait_closed()
    except (TimeoutError, OSError, asyncssh.Error):
        return []
    finally:
        server.close()
        await server.wait_closed()
    return walls
