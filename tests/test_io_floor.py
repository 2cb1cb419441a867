"""The wall-time floor of SSH waits follows what connects measure: a host that never answers is
given up on after a few times this machine's handshake, not after a fixed wall second (10
market minutes at the referee's 600x); the real market (time scale 1) is never measured."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import asyncssh
import pytest
from rentwatch.core.lifecycle import Lifecycle
from rentwatch.engine.hosts.link import IO_CEILING_CAP_S, IO_FLOOR_MAX_S, IO_FLOOR_MIN_S, HostLink
from rentwatch.engine.hosts.ssh import SSHRunner, loopback_handshakes
from rentwatch.engine.rentals import Writer


@pytest.fixture(scope="module")
def key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


def _link(key: asyncssh.SSHKey, time_scale: float) -> HostLink:
    market: Any = SimpleNamespace(time_scale=time_scale, now=lambda: 0.0)
    journal = SimpleNamespace(writer=Writer(None))  # type: ignore[arg-type]  (no ledger event)
    return HostLink(SSHRunner(key), market, journal)  # type: ignore[arg-type]


def test_loopback_handshakes_are_measured(key):
    walls = asyncio.run(loopback_handshakes(key, 3, 5.0))
    assert len(walls) == 3 and all(0 < w < 5.0 for w in walls)


def test_the_floor_follows_the_slowest_connect_within_its_bounds(key):
    link = _link(key, 600)
    assert link.io_floor() == IO_FLOOR_MAX_S  # nothing measured yet: the cautious floor
    link.ssh.connect_walls.extend([0.004, 0.006])
    assert link.io_floor() == IO_FLOOR_MAX_S  # two connects are not enough to go by
    link.ssh.connect_walls.append(0.005)
    assert link.io_floor() == IO_FLOOR_MIN_S  # fast connects: never under the least floor
    link.ssh.connect_walls.append(0.09)  # one slow connect on a loaded machine lifts it
    assert IO_FLOOR_MIN_S < link.io_floor() < IO_FLOOR_MAX_S
    link.ssh.connect_walls.append(0.4)  # handshakes that take most of a second: the load's
    assert link.io_floor() == pytest.approx(2.0)
    link.ssh.connect_walls.append(3.0)  # and never over the ceiling's cap
    assert link.io_floor() == IO_CEILING_CAP_S


def test_calibration_runs_only_where_the_floor_can_matter(key):
    fast, real = _link(key, 600), _link(key, 1)
    asyncio.run(fast.calibrate())
    asyncio.run(real.calibrate())
    # measured (how fast, the box's load says: the floor follows it, as the test above shows)
    assert len(fast.ssh.connect_walls) == 3
    assert not real.ssh.connect_walls  # time scale 1: 20 s of connect timeout is over any floor


def test_a_try_without_an_answer_measures_the_load_again(key):
    # the floor learns from connects that answered; a machine too loaded to answer in time must
    # still raise it, so each preflight try that got no answer adds a loopback measurement
    from rentwatch.engine.hosts.ssh import SSHFailure

    link = _link(key, 600)

    async def run() -> None:
        await link.calibrate()
        closed = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = closed.sockets[0].getsockname()[1]
        closed.close()
        await closed.wait_closed()  # nothing listens there now: refused at once
        host: Any = SimpleNamespace(
            instance_id=1,
            ssh_host="127.0.0.1",
            ssh_port=port,
            offer=object(),  # ours: no attach
        )
        with pytest.raises(SSHFailure):
            await link.probe(host, b"", 5.0)

    asyncio.run(run())
    assert len(link.ssh.connect_walls) == 4


def test_a_policy_floor_over_a_second_is_the_ceiling(key):
    link = _link(key, 600)
    link.io_floor_max = 3.0
    assert link.io_floor() == 3.0
    link.ssh.connect_walls.extend([0.5, 0.5, 0.5])
    assert link.io_floor() == 2.5  # five times the slowest, under the policy's own ceiling


def test_sessions_with_proven_hosts_wait_longer_on_a_loaded_machine(key):
    # a fixed one-second ceiling made a proven host look dead when a handshake took most of a
    # second (3 pytest workers and a TUI pass on 2 cores): the ceiling follows the slowest
    # recent connect, up to its cap, and never falls under the floor's ceiling
    link = _link(key, 600)
    assert link.io_ceiling() == IO_FLOOR_MAX_S
    link.ssh.connect_walls.extend([0.01, 0.02, 0.01])
    assert link.io_ceiling() == IO_FLOOR_MAX_S  # an idle machine: as before
    link.ssh.connect_walls.append(0.6)
    assert link.io_ceiling() == pytest.approx(3.0)
    assert link.io_floor() == pytest.approx(3.0)  # a first contact waits as long, no longer
    link.ssh.connect_walls.append(5.0)
    assert link.io_ceiling() == IO_CEILING_CAP_S
    # the walls are the latest connects: once the load is gone, so is the longer wait
    link.ssh.connect_walls.extend([0.01] * link.ssh.connect_walls.maxlen)  # type: ignore[operator]
    assert link.io_ceiling() == IO_FLOOR_MAX_S


def test_a_session_without_an_answer_measures_the_load_again_now_and_then(key):
    from rentwatch.engine.hosts.ssh import SSHFailure

    link = _link(key, 600)
    clock = [100.0]
    link.ssh.wall_clock = lambda: clock[0]  # type: ignore[method-assign]

    async def run() -> None:
        await link.calibrate()
        host: Any = SimpleNamespace(
            instance_id=1,
            ssh_host="127.0.0.1",
            ssh_port=1,
            offer=object(),
            look_wanted=False,
            silent_since=None,
            status="running",
            life=Lifecycle(),
        )
        assert len(link.ssh.connect_walls) == 3
        for _ in range(3):  # a dead host fails each look; the load is measured once a while
            clock[0] += 1.0
            with pytest.raises(SSHFailure):
                await link.run(host, "true", timeout=1)
        assert len(link.ssh.connect_walls) == 3 + 1  # at 102 s, 2 s after the calibration
        with pytest.raises(SSHFailure):
            await link.run(host, "true", timeout=1)
        assert len(link.ssh.connect_walls) == 4  # 1 s after that: not again yet

    asyncio.run(run())


class _Host(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False  # in at once: the handshake is what this host is slow at


async def _slow_host(delay: float) -> tuple[Any, Any, int]:
    """A loopback SSH server behind a relay that holds each connection's first bytes back
    `delay` wall seconds: a host whose handshake takes that long, however fast this box."""
    server = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
        server_factory=_Host,
        process_factory=lambda proc: proc.exit(0),
        keepalive_interval=0,
    )
    target = server.sockets[0].getsockname()[1]

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(delay)
        up_r, up_w = await asyncio.open_connection("127.0.0.1", target)

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while chunk := await r.read(65536):
                    w.write(chunk)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    front = await asyncio.start_server(relay, "127.0.0.1", 0)
    return server, front, front.sockets[0].getsockname()[1]


def test_a_host_slower_than_the_floor_is_reached_by_a_longer_try(key):
    """Found under load: the floor comes from loopback handshakes in this process, and a
    loaded box's host (the simulator, in another thread or process) took longer than any
    multiple of it; every preflight try timed out at the same floor until the SSH deadline
    called a healthy host dead. Each try that no route answered in time doubles the next
    one's connect floor, up to the ceiling's cap; an answer resets it."""
    from rentwatch.engine.hosts.ssh import NoAnswer

    link = _link(key, 600)
    link.journal = SimpleNamespace(fact=lambda *a, **kw: None)  # type: ignore[assignment]
    link.ssh.connect_walls.extend([0.001] * 3)  # a fast loopback: the least floor
    assert link.io_floor() == IO_FLOOR_MIN_S
    delay = 3 * IO_FLOOR_MIN_S  # slower than the floor, well within the cap

    async def run() -> list[str]:
        server, front, port = await _slow_host(delay)
        host: Any = SimpleNamespace(
            instance_id=1, ssh_host="127.0.0.1", ssh_port=port, offer=object()
        )
        said: list[str] = []
        try:
            for _ in range(6):  # 0.2, 0.4, 0.8, ... wall seconds: 6 s by the sixth try
                try:
                    await link.probe(host, b"", 30.0, "true")
                except NoAnswer as exc:
                    said.append(f"no answer: {exc}")
                    continue
                said.append("answered")
                break
        finally:
            front.close()
            server.close()
        return said

    said = asyncio.run(run())
    assert said[-1] == "answered" and len(said) >= 2, said
    assert all(s.startswith("no answer") for s in said[:-1])
    assert link.unanswered == {}  # the answer reset it
    assert link.first_contact_floor(10) == IO_CEILING_CAP_S
