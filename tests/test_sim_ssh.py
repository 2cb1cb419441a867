"""Simulated hosts answer real SSH: commands run for real, files come back over SFTP, the
container-scoped key works against the sim's API, and GPU probes get the machine's truth."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import asyncssh
import httpx
import pytest
from rentwatch.market.vast.client import VastClient


async def _running(c: VastClient, iid: int, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        inst = await c.show_instance(iid)
        if inst and inst.status == "running" and inst.ssh_port:
            return inst
        await asyncio.sleep(0.1)
    raise AssertionError("never running")


async def _rented(c: VastClient, key: asyncssh.SSHKey) -> tuple[int, Any]:
    """The market's first offer rented on an account that holds `key`, once it runs."""
    await c.add_ssh_key(key.export_public_key().decode())
    offer = (await c.search_offers({}))[0]
    res = await c.create_instance(offer.id, image="img", disk_gb=10)
    return res.instance_id, await _running(c, res.instance_id)


@pytest.mark.parametrize("behaviour", ["healthy", "stale_driver"])
def test_ssh_command_sftp_and_probe(make_sim, tmp_path, behaviour):
    sim = make_sim(
        seed=4,
        offers=4,
        time_scale=3000,
        host_class=[{"behaviour": behaviour, "share": 1}],
        ssh={"container_env": 1.0},  # sessions carry the container variables (Vast images)
    )
    key = asyncssh.generate_private_key("ssh-ed25519")

    async def run() -> None:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            iid, inst = await _rented(c, key)
            async with asyncssh.connect(
                inst.ssh_host, inst.ssh_port, username="root", client_keys=[key], known_hosts=None
            ) as conn:
                r = await conn.run("echo $CONTAINER_ID; echo hello > out.txt; exit 3")
                assert r.stdout.split()[0] == str(iid) and r.exit_status == 3
                async with conn.start_sftp_client() as sftp:
                    await sftp.get("out.txt", str(tmp_path / "out.txt"))
                assert (tmp_path / "out.txt").read_text() == "hello\n"
                r = await conn.run("python3 -", input="# rentwatch-probe: preflight\nprint('x')\n")
                answer = json.loads(r.stdout)
                assert answer["probe"] == "preflight"
                if behaviour == "healthy":
                    assert answer["ok"] and answer["matmul"]["tflops"] > 10
                else:
                    assert (
                        not answer["ok"]
                        and "driver version is insufficient" in answer["error"]["message"]
                    )
                # the container-scoped key can stop its own instance, and nothing else
                r = await conn.run(
                    "python3 -c \"import os,urllib.request as u; rq=u.Request(os.environ['VAST_URL']+"
                    "'/api/v0/instances/'+os.environ['CONTAINER_ID']+'/', data=b'{\\\"state\\\": \\\"stopped\\\"}', "
                    "method='PUT', headers={'Authorization': 'Bearer '+os.environ['CONTAINER_API_KEY'], "
                    "'Content-Type': 'application/json'}); print(u.urlopen(rq).read().decode())\""
                )
                assert '"success": true' in r.stdout, r.stderr
            row = await c.show_instance(iid)
            assert row.target_state == "stopped"
            scoped = await asyncio.to_thread(lambda: sim.market.instances[iid].api_key)
            r = httpx.get(
                f"{sim.url}/api/v1/instances/", headers={"Authorization": f"Bearer {scoped}"}
            )
            assert r.status_code == 403

    asyncio.run(run())


def test_wrong_key_is_refused_and_ssh_dead_stalls(make_sim):
    sim = make_sim(
        seed=4, offers=4, time_scale=3000, host_class=[{"behaviour": "ssh_dead", "share": 1}]
    )
    stranger = asyncssh.generate_private_key("ssh-ed25519")

    async def run() -> None:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            offer = (await c.search_offers({}))[0]
            res = await c.create_instance(offer.id, image="img", disk_gb=10)
            inst = await _running(c, res.instance_id)
            with pytest.raises((asyncio.TimeoutError, asyncssh.Error, OSError)):
                await asyncio.wait_for(
                    asyncssh.connect(
                        inst.ssh_host,
                        inst.ssh_port,
                        username="root",
                        client_keys=[stranger],
                        known_hosts=None,
                    ),
                    1.0,
                )

    asyncio.run(run())


_STOP_SELF = """
import os, time, urllib.request as u
rq = u.Request(
    os.environ["VAST_URL"] + "/api/v0/instances/" + os.environ["CONTAINER_ID"] + "/",
    data=b'{"state": "stopped"}',
    method="PUT",
    headers={"Authorization": "Bearer " + os.environ["CONTAINER_API_KEY"]},
)
answer = u.urlopen(rq).read().decode()
open("asked", "w").close()
while not os.path.exists("go"):  # the test's word: the host has seen the stop
    time.sleep(0.01)
print(answer)
"""


def test_a_command_that_stops_its_own_instance_still_answers(make_sim):
    """The host hears of the stop (a sync) after the call answered and before the command
    printed: the command's answer still comes back, then the stop closes the connection."""
    sim = make_sim(
        seed=4,
        offers=4,
        time_scale=3000,
        host_class=[{"behaviour": "healthy", "share": 1}],
        ssh={"container_env": 1.0},
    )
    key = asyncssh.generate_private_key("ssh-ed25519")

    async def run() -> None:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            iid, inst = await _rented(c, key)
            box = sim.ssh.sandbox(sim.market.instances[iid])
            async with asyncssh.connect(
                inst.ssh_host, inst.ssh_port, username="root", client_keys=[key], known_hosts=None
            ) as conn:
                ran = asyncio.ensure_future(conn.run("python3 -", input=_STOP_SELF))
                while not (box / "asked").exists() and not ran.done():
                    await asyncio.sleep(0.01)
                await asyncio.to_thread(sim.call, sim.ssh.sync)  # the host sees the stop now
                (box / "go").touch()
                r = await ran
                assert '"success": true' in r.stdout and r.exit_status == 0, r
                await asyncio.wait_for(conn.wait_closed(), 30)  # and then the box goes down
            row = await c.show_instance(iid)
            assert row.target_state == "stopped"

    asyncio.run(run())
