"""One SSH connection per host, its commands sessions on it (app/engine/hosts/held.py): the
simulated sshd counts the handshakes; a connection the host ended is replaced, never written
into; a stopped or re-keyed host's connections end with it; nothing is left open at the end."""

from __future__ import annotations

import asyncio

import asyncssh
import pytest
from rentwatch.engine.hosts.held import Held, Pool
from rentwatch.engine.hosts.ssh import HostKeyChanged, SSHFailure, SSHRunner
from rentwatch.market.vast.client import VastClient

from .ledgers import new_ledger
from .test_sim_fidelity import HEALTHY, _running


def _sim(make_sim, **ssh):
    return make_sim(seed=8, offers=6, time_scale=3000, host_class=HEALTHY, ssh=ssh)


async def _host(sim, runner: SSHRunner, n: int = 1):
    async with VastClient(sim.url, "test-key", min_intervals={}) as c:
        await c.add_ssh_key(runner.public_key)
        for offer in (await c.search_offers({}))[:n]:
            await c.create_instance(offer.id, image="img", disk_gb=10)
        return await _running(c, n)


async def _closed(conn: asyncssh.SSHClientConnection) -> bool:
    """Whether the connection ends (within a bound that only keeps a broken build from hanging)."""
    try:
        await asyncio.wait_for(conn.wait_closed(), 30)
    except TimeoutError:
        return False
    return conn.is_closed()


def test_a_hosts_commands_share_one_connection(make_sim):
    sim = _sim(make_sim)
    runner = SSHRunner(asyncssh.generate_private_key("ssh-ed25519"), connect_timeout=5.0)

    async def run() -> None:
        [inst] = await _host(sim, runner)
        before = sim.ssh.handshakes
        outs = [
            await runner.run(inst.id, inst.ssh_host, inst.ssh_port, f"echo {i}") for i in range(5)
        ]
        # at once too: sessions side by side on the one connection
        outs += await asyncio.gather(
            *(runner.run(inst.id, inst.ssh_host, inst.ssh_port, "echo x") for _ in range(4))
        )
        assert [o.stdout for o in outs[:5]] == [f"{i}\n".encode() for i in range(5)]
        assert all(o.exit_status == 0 for o in outs)
        assert sim.ssh.handshakes - before == 1
        assert len(runner.pool.by_instance[inst.id]) == 1
        await runner.close()

    asyncio.run(run())


def test_a_connection_the_host_ended_is_replaced_before_the_command_goes_out(make_sim):
    sim = _sim(make_sim)
    runner = SSHRunner(asyncssh.generate_private_key("ssh-ed25519"), connect_timeout=5.0)

    async def run() -> None:
        [inst] = await _host(sim, runner)
        where = (inst.id, inst.ssh_host, inst.ssh_port)
        await runner.run(*where, "true")
        held = runner.pool.reusable(where)
        sim.call(sim.ssh.disconnect, inst.id)  # the client has not read the close yet
        res = await runner.run(*where, "echo again")
        assert res.stdout == b"again\n" and res.exit_status == 0
        assert runner.pool.reusable(where) is not held and held.dropped
        assert await _closed(held.conn)
        # a command that timed out leaves its connection dropped: the next one connects anew
        made = sim.ssh.handshakes
        hung = runner.pool.reusable(where)
        with pytest.raises(SSHFailure, match="did not finish"):
            await runner.run(*where, "sleep 30", timeout=0.5)
        assert hung.dropped and await _closed(hung.conn)
        assert (await runner.run(*where, "echo ok")).stdout == b"ok\n"
        assert sim.ssh.handshakes == made + 1
        await runner.close()

    asyncio.run(run())


def test_a_stopped_or_rekeyed_hosts_connections_end_with_it(make_sim):
    sim = _sim(make_sim)
    runner = SSHRunner(asyncssh.generate_private_key("ssh-ed25519"), connect_timeout=5.0)

    async def run() -> None:
        first, second = await _host(sim, runner, 2)
        for i in (first, second):
            await runner.run(i.id, i.ssh_host, i.ssh_port, "true")
        held = runner.pool.reusable((first.id, first.ssh_host, first.ssh_port))
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            await c.stop_instance(first.id)
        sim.call(sim.ssh.sync)
        assert await _closed(held.conn)  # the host's sshd ended it: nothing to write into
        with pytest.raises(SSHFailure):  # and the stopped host has no sshd to reach
            await runner.run(first.id, first.ssh_host, first.ssh_port, "true", timeout=5)

        other = runner.pool.reusable((second.id, second.ssh_host, second.ssh_port))
        sim.call(sim.ssh.replace_host_key, second.id)
        assert await _closed(other.conn)
        [moved] = [i for i in await _listed(sim) if i.id == second.id]
        with pytest.raises(HostKeyChanged):  # refused on the new connection, as before
            await runner.run(moved.id, moved.ssh_host, moved.ssh_port, "true", timeout=5)
        await runner.close()

    asyncio.run(run())


async def _listed(sim):
    async with VastClient(sim.url, "test-key", min_intervals={}) as c:
        return await c.list_instances()


def test_nothing_is_left_open_at_the_end(make_sim):
    sim = _sim(make_sim, direct_share=1.0)
    runner = SSHRunner(asyncssh.generate_private_key("ssh-ed25519"), connect_timeout=5.0)

    async def run() -> list[asyncssh.SSHClientConnection]:
        hosts = await _host(sim, runner, 2)
        for i in hosts:
            runner.set_routes(i.id, i)
            for route in i.ssh_routes:  # the direct route's connection, and the proxy's
                await runner.run(i.id, route.host, route.port, "true")
        conns = [h.conn for held in runner.pool.by_instance.values() for h in held.values()]
        assert len(conns) == 4
        await runner.close()
        assert not runner.pool.by_instance
        return conns

    conns = asyncio.run(run())
    assert all(c.is_closed() for c in conns)
    assert not any(sim.call(lambda: [c for s in sim.ssh.connections.values() for c in s]))


class _Conn:
    def __init__(self) -> None:
        self.closed = False

    def is_closed(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def test_a_dropped_connection_closes_only_after_its_sessions_end():
    pool = Pool()
    conn = _Conn()
    held = pool.keep((1, "h", 22), conn)  # type: ignore[arg-type]
    assert pool.reusable((1, "h", 22)) is held
    held.enter()
    pool.forget(1)  # the instance was stopped while a session ran on it
    assert not conn.closed and pool.reusable((1, "h", 22)) is None
    held.leave()
    assert conn.closed
    # a second connection made at once for a route already held is closed: the held one serves
    first, second = _Conn(), _Conn()
    kept = pool.keep((2, "h", 22), first)  # type: ignore[arg-type]
    assert pool.keep((2, "h", 22), second) is kept  # type: ignore[arg-type]
    assert pool.reusable((2, "h", 22)) is kept and isinstance(kept, Held)
    assert second.closed and not first.closed
    pool.forget(2, keep={("h", 22)})  # a route still listed keeps its connection
    assert pool.reusable((2, "h", 22)) is kept
    first.closed = True  # the host ended it
    assert pool.reusable((2, "h", 22)) is None and not pool.by_instance


def test_a_supervisors_close_closes_the_connections_it_holds(make_sim):
    """A session that ends and leaves its hosts running (a detach) leaves no socket open."""
    from rentwatch.core.policy import SEED
    from rentwatch.engine.supervisor import Supervisor

    from .fake_market import FakeMarket, campaign

    sim = _sim(make_sim)
    runner = SSHRunner(asyncssh.generate_private_key("ssh-ed25519"), connect_timeout=5.0)

    async def run() -> asyncssh.SSHClientConnection:
        [inst] = await _host(sim, runner)
        await runner.run(inst.id, inst.ssh_host, inst.ssh_port, "true")
        [held] = runner.pool.by_instance[inst.id].values()
        sup = Supervisor(FakeMarket([]), new_ledger(), campaign(), SEED, runner, log=print)
        await sup.close()
        assert not runner.pool.by_instance
        return held.conn

    conn = asyncio.run(run())
    assert conn.is_closed()


def test_a_held_connection_to_a_host_gone_silent_is_given_up_by_keepalive(make_sim):
    """A host that stops answering without closing anything (its box died, the network cut):
    the runner's keepalives go unanswered and it gives the connection up, so no command is
    written into it."""
    sim = _sim(make_sim)
    runner = SSHRunner(
        asyncssh.generate_private_key("ssh-ed25519"), connect_timeout=5.0, keepalive_s=0.1
    )
    silent = asyncio.Event()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not silent.is_set() and (data := await reader.read(65536)):
            if silent.is_set():
                break
            writer.write(data)
        await asyncio.Event().wait()  # silent: nothing goes through, nothing is closed

    async def run() -> None:
        [inst] = await _host(sim, runner)

        async def open_relay(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            hr, hw = await asyncio.open_connection(inst.ssh_host, inst.ssh_port)
            pumps.extend(asyncio.ensure_future(p) for p in (relay(r, hw), relay(hr, w)))

        pumps: list[asyncio.Future] = []
        server = await asyncio.start_server(open_relay, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        assert (await runner.run(inst.id, "127.0.0.1", port, "echo up")).stdout == b"up\n"
        [held] = runner.pool.by_instance[inst.id].values()
        silent.set()
        assert await _closed(held.conn)
        assert runner.pool.reusable(held.key) is None
        for p in pumps:
            p.cancel()
        server.close()
        await runner.close()

    asyncio.run(run())
