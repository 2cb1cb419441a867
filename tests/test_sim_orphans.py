"""Stopping the simulator ends every process its hosts' commands started, the detached ones
included (jobs and watchdogs launch with `setsid nohup`, a process group of their own that
outlives the session); destroying a host ends its processes at once (issue 29 item 8)."""

from __future__ import annotations

import asyncio
import os
import time

import asyncssh
from rentwatch.market.vast.client import VastClient
from rentwatch.sim.host_procs import host_processes

from tests.test_sim_ssh import _running

DETACH = "setsid nohup sh -c 'sleep 301; echo late > late.txt' >/dev/null 2>&1 </dev/null & "
PLAIN = "nohup sleep 302 >/dev/null 2>&1 </dev/null & echo launched"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


def _sleeps(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(b"sleep\0"):
                    out.append(pid)
        except OSError:
            pass
    return out


def test_stopping_the_simulator_leaves_no_host_process(make_sim):
    sim = make_sim(
        seed=4, offers=4, time_scale=3000, host_class=[{"behaviour": "healthy", "share": 1}]
    )
    key = asyncssh.generate_private_key("ssh-ed25519")
    ids: list[int] = []

    async def launch() -> None:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            await c.add_ssh_key(key.export_public_key().decode())
            offers = await c.search_offers({})
            for offer in offers[:2]:
                res = await c.create_instance(offer.id, image="img", disk_gb=10)
                inst = await _running(c, res.instance_id)
                async with asyncssh.connect(
                    inst.ssh_host, inst.ssh_port, username="root", client_keys=[key],
                    known_hosts=None,
                ) as conn:  # fmt: skip
                    r = await conn.run(DETACH + PLAIN)
                    assert "launched" in r.stdout, r.stderr
                ids.append(res.instance_id)

    asyncio.run(launch())
    root = sim.ssh.workdir
    deadline = time.monotonic() + 10
    while len(_sleeps(host_processes(root))) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    first = _sleeps(host_processes(root / f"i{ids[0]}"))
    second = _sleeps(host_processes(root / f"i{ids[1]}"))
    assert len(first) == 2 and len(second) == 2, (first, second)
    assert os.getpgid(first[0]) != os.getpgid(first[1])  # one detached into a group of its own

    async def destroy() -> None:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            await c.destroy_instance(ids[1])

    asyncio.run(destroy())
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in second) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in second), "a destroyed host's processes ran on"
    assert all(_alive(p) for p in first)  # the other host's go on

    sim.stop_thread()
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in first) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in first if _alive(p)]
    assert not left, f"still running after stop_thread: {left}"
    assert not [p for p in host_processes(root) if _alive(p)]
