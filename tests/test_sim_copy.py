"""Copy between instances (`PUT /api/v0/commands/copy_direct/`, Vast's way to get data off a
stopped instance): asked through the client (and the official CLI), answered at once, landed
about 30 s of market time later, billed as bandwidth on both machines; refusals carry the
market's words. A copy needs the source's host up and with open ports (it runs over SSH), and
bills nothing between two instances on one machine or one host's local network."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from rentwatch.market.errors import ApiError
from rentwatch.market.vast.client import VastClient

from .test_vastai_cli import vastai

HEALTHY = [{"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "dph": [0.3, 0.4]}]
OPEN = {"direct_share": 1.0}  # every host has open ports: a copy may come off any of them


def _booted(sim, insts: list) -> list:
    """The market jumped to where each of `insts` runs (their boots are drawn at the create;
    the copy, not the boot, is what these tests check), its hosts' SSH opened at that time."""

    def jump() -> None:
        clock = sim.market.clock
        clock.advance(max(i.segments[-1].running_at for i in insts) + 1 - clock.now())

    sim.call(jump)
    sim.call(sim.ssh.sync)
    assert all(sim.call(lambda i=i: i.running(sim.market.clock.now())) for i in insts)
    return insts


def _until(cond, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError("condition never met")


def _rent_two(sim) -> list[int]:
    async def rent() -> list[int]:
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            offers = (await c.search_offers({}))[:2]
            return [
                (await c.create_instance(o.id, image="img", disk_gb=10)).instance_id for o in offers
            ]

    return asyncio.run(rent())


def test_a_stopped_instances_folder_is_copied_to_another(make_sim, tmp_path):
    sim = make_sim(seed=6, offers=4, time_scale=60, host_class=HEALTHY, pacing=False, ssh=OPEN)
    assert sim.ssh is not None
    ids = _rent_two(sim)
    src, dst = (sim.market.instances[i] for i in ids)
    _booted(sim, [src, dst])
    home = sim.ssh.sandbox(src)
    (home / "ckpt" / "sub").mkdir(parents=True)
    (home / "ckpt" / "w.bin").write_bytes(b"x" * 5000)
    (home / "ckpt" / "sub" / "step").write_text("41\n")
    sim.call(lambda: sim.market.stop(src))  # stopped: its disk is kept, and can be copied off

    async def copy() -> float:
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            with pytest.raises(ApiError, match="No such user"):
                await c.copy_between(999, "/root/ckpt/", dst.id, "/root/in/")
            with pytest.raises(ValueError, match="absolute"):
                await c.copy_between(src.id, "ckpt/", dst.id, "/root/in/")
            await c.copy_between(src.id, f"{home}/ckpt/", dst.id, "/root/in/")
            return c.now()

    asked = asyncio.run(copy())
    landed = sim.ssh.sandbox(dst) / "in"
    assert not (landed / "w.bin").exists()  # answered at once, landed later
    [c] = sim.market.copies
    _until(lambda: c.landed)  # the sim's thread marks it once the files are in
    assert (landed / "w.bin").read_bytes() == b"x" * 5000  # what the folder held, inside "in/"
    assert c.landed and c.due_at is not None and c.due_at - asked >= 29
    # billed as the source's upload and the destination's download: (at, into, out) USD
    size = c.bytes
    assert size == 5003
    assert [t[1:] for t in src.transfers] == [(0.0, size * src.machine.inet_up_cost / 1e9)]
    assert [t[1:] for t in dst.transfers] == [(size * dst.machine.inet_down_cost / 1e9, 0.0)]

    async def more() -> None:  # rsync's rules for the source's trailing slash
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            await c.copy_between(src.id, f"{home}/ckpt/w.bin/", dst.id, "/root/f/")
            await c.copy_between(src.id, f"{home}/ckpt", dst.id, "/root/whole/")

    asyncio.run(more())
    _until(lambda: sim.call(lambda: all(c.done for c in sim.market.copies)))
    file_slash, whole = sim.market.copies[1:]
    assert not file_slash.landed  # `file/`: "Not a directory", nothing copied
    assert not any((sim.ssh.sandbox(dst) / "f").glob("*"))
    assert whole.landed  # no slash: the folder itself, under its name
    assert (sim.ssh.sandbox(dst) / "whole" / "ckpt" / "sub" / "step").read_text() == "41\n"


def test_the_official_cli_asks_a_copy_and_bad_bodies_are_refused(make_sim, tmp_path):
    sim = make_sim(seed=6, offers=4, time_scale=60, host_class=HEALTHY, pacing=False, ssh=OPEN)
    ids = _rent_two(sim)
    out = vastai(sim, "copy", f"{ids[0]}:/root/ckpt/", f"{ids[1]}:/root/in/", tmp_path=tmp_path)
    assert "Remote to Remote copy initiated" in out, out
    [c] = sim.market.copies
    assert (c.src_id, c.src_path, c.dst_id, c.dst_path) == (
        ids[0],
        "/root/ckpt/",
        ids[1],
        "/root/in/",
    )
    for body, word in (
        ({"src_id": ids[0], "dst_id": ids[1], "dst_path": "/x/"}, "src_path"),
        ({"src_id": "abc", "dst_id": ids[1], "src_path": "/a/", "dst_path": "/x/"}, "src_id"),
        ([1, 2], "src_path"),
    ):
        r = httpx.put(
            f"{sim.url}/api/v0/commands/copy_direct/",
            json=body,
            headers={"Authorization": f"Bearer {sim.api_key}"},
        )
        assert r.status_code == 400 and word in r.json()["msg"]
    # the CLI's container form, `C.ID:/path`, names the same instances
    out = vastai(
        sim, "copy", f"C.{ids[0]}:/root/ckpt/", f"C.{ids[1]}:/root/in2/", tmp_path=tmp_path
    )
    assert "Remote to Remote copy initiated" in out, out
    assert (sim.market.copies[-1].src_id, sim.market.copies[-1].dst_id) == (ids[0], ids[1])
    out = vastai(sim, "cancel", "copy", f"C.{ids[1]}", tmp_path=tmp_path)
    assert "Remote copy canceled" in out, out


def test_a_copy_cancelled_before_it_lands_never_lands_nor_bills(make_sim, tmp_path):
    sim = make_sim(seed=6, offers=4, time_scale=60, host_class=HEALTHY, pacing=False, ssh=OPEN)
    assert sim.ssh is not None
    src_id, dst_id = _rent_two(sim)
    src, dst = sim.market.instances[src_id], sim.market.instances[dst_id]
    _booted(sim, [src, dst])
    home = sim.ssh.sandbox(src)
    (home / "ckpt").mkdir()
    (home / "ckpt" / "w.bin").write_bytes(b"x" * 5000)

    async def go() -> None:
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            await c.copy_between(src.id, f"{home}/ckpt/", dst.id, "/root/in/")
            await c.cancel_copies_to(dst.id)  # within the ~30 s before anything lands
            with pytest.raises(ApiError, match="open port"):
                await c.cancel_copies_to(987654)  # the OpenAPI's 400 for no such destination

    asyncio.run(go())
    [c] = sim.market.copies
    assert c.cancelled and c.done and not c.landed
    sim.call(sim.market.clock.advance, 60)  # past when it was due
    sim.call(sim.ssh.sync)  # the hosts at that time: a copy due lands there
    assert not (sim.ssh.sandbox(dst) / "in").exists()
    assert not src.transfers and not dst.transfers
    # the official CLI's `cancel copy DST` is the same call (its success message is printed
    # only for `success: true`; with nothing under way there is nothing to end)
    out = vastai(sim, "cancel", "copy", str(dst.id), tmp_path=tmp_path)
    assert "Remote copy canceled" in out, out
    r = httpx.request(
        "DELETE",
        f"{sim.url}/api/v0/commands/copy_direct/",
        json={"client_id": "me", "dst_id": "x"},
        headers={"Authorization": f"Bearer {sim.api_key}"},
    )
    assert r.status_code == 400 and r.json()["msg"] == "Invalid dst_id."


def _running(sim, ids: list[int]) -> list:
    return _booted(sim, [sim.market.instances[i] for i in ids])


def test_a_source_without_an_open_port_is_refused_and_an_offline_one_sends_nothing(make_sim):
    sim = make_sim(
        seed=6,
        offers=4,
        time_scale=60,
        host_class=HEALTHY,
        pacing=False,
        ssh={"direct_share": 0.0},  # proxy only: no host has an open port
    )
    assert sim.ssh is not None
    src, dst = _running(sim, _rent_two(sim))
    home = sim.ssh.sandbox(src)
    (home / "ckpt").mkdir()
    (home / "ckpt" / "w.bin").write_bytes(b"x" * 5000)

    async def ask() -> None:
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            await c.copy_between(src.id, f"{home}/ckpt/", dst.id, "/root/in/")

    async def ports() -> set[int | None]:  # what rentwatch reads to ask no such copy
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            return {o.direct_port_count for o in await c.search_offers({})}

    assert asyncio.run(ports()) == {0}
    # data-movement.mdx: copies run over SSH; the API's words for a host without open ports
    with pytest.raises(ApiError, match="Remote instance does not have an open port"):
        asyncio.run(ask())
    assert not sim.market.copies
    # its host opens ports, then goes offline before the copy is through: nothing comes off
    sim.call(lambda: setattr(src.machine, "direct", True))
    asyncio.run(ask())

    def dark() -> None:
        src.segments[-1].offline_at = sim.market.clock.now()

    sim.call(dark)
    _until(lambda: sim.call(lambda: all(c.done for c in sim.market.copies)))
    [c] = sim.market.copies
    assert not c.landed and not c.billed
    assert not (sim.ssh.sandbox(dst) / "in").exists()
    assert not src.transfers and not dst.transfers


def test_a_copy_within_one_hosts_network_bills_no_bandwidth(make_sim):
    sim = make_sim(seed=6, offers=4, time_scale=60, host_class=HEALTHY, pacing=False, ssh=OPEN)
    assert sim.ssh is not None
    src, dst = _running(sim, _rent_two(sim))
    assert src.machine.id != dst.machine.id

    def one_network() -> None:  # "same provider and location" (data-movement.mdx)
        dst.machine.host_id, dst.machine.geolocation = src.machine.host_id, src.machine.geolocation

    sim.call(one_network)
    home = sim.ssh.sandbox(src)
    (home / "ckpt").mkdir()
    (home / "ckpt" / "w.bin").write_bytes(b"x" * 5000)

    async def ask() -> None:
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            await c.copy_between(src.id, f"{home}/ckpt/", dst.id, "/root/in/")

    asyncio.run(ask())
    _until(lambda: sim.call(lambda: all(c.done for c in sim.market.copies)))
    [c] = sim.market.copies
    assert c.landed and c.bytes == 5000 and not c.billed
    assert (sim.ssh.sandbox(dst) / "in" / "w.bin").read_bytes() == b"x" * 5000
    assert not src.transfers and not dst.transfers
    assert src.machine.inet_up_cost > 0 or dst.machine.inet_down_cost > 0  # it would have billed
