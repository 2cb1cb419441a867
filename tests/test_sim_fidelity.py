"""The simulator is as unkind as the real marketplace (issue 19): two SSH routes that never
share an address and port, a proxy that drops sessions, `scheduling` and unnamed states,
build output in status lines, the docs' billing (nothing while offline, bandwidth per byte),
contract-end stops, pages of 25, paced intervals, ids that never restart, "City, CC"."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time

import asyncssh
import httpx
import pytest
from rentwatch.core.billing import Mark, charges
from rentwatch.core.blame.patterns import fatal_match
from rentwatch.core.models import Instance, SSHRoute
from rentwatch.engine.hosts.ssh import SSHFailure, SSHRunner
from rentwatch.market.vast.client import VastClient
from rentwatch.market.vast.rows import parse_instance
from rentwatch.sim.market import SimClock, SimMarket
from rentwatch.sim.rental import BUILD_LINES, FATAL_TEXTS
from rentwatch.sim.scenario import parse_scenario

HEALTHY = [{"behaviour": "healthy", "share": 1}]


def _market(**kw) -> SimMarket:
    sc = parse_scenario(kw)
    return SimMarket(sc, SimClock(sc.time_scale, origin=1_764_400_000.0), api_key="k")


async def _running(c: VastClient, n: int, timeout: float = 40) -> list[Instance]:
    """`n` instances running, their routes as two list answers in a row give them (a direct
    port is published a little after the proxy's: under load a test read one answer without
    it and the next, raw, with it)."""
    deadline = time.monotonic() + timeout
    last: list[tuple[int, tuple]] | None = None
    while time.monotonic() < deadline:
        live = [i for i in await c.list_instances() if i.status == "running" and i.ssh_port]
        seen = sorted((i.id, tuple(i.ssh_routes)) for i in live)
        if len(live) >= n and seen == last:
            return live
        last = seen
        await asyncio.sleep(0.1)
    raise AssertionError("never running")


def test_two_routes_paired_and_distinct(make_sim):
    sim = make_sim(
        seed=3, offers=12, time_scale=3000, host_class=HEALTHY, ssh={"direct_share": 0.5}
    )
    key = asyncssh.generate_private_key("ssh-ed25519")

    async def run() -> tuple[list[Instance], list[dict]]:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            await c.add_ssh_key(key.export_public_key().decode())
            for offer in await c.search_offers({}):
                await c.create_instance(offer.id, image="img", disk_gb=10)
            live = await _running(c, 12)
            raw = httpx.get(
                f"{sim.url}/api/v1/instances/", headers={"Authorization": "Bearer test-key"}
            ).json()["instances"]
            # every route answers real SSH, on its own address and port
            for inst in live:
                for r in inst.ssh_routes:
                    async with asyncssh.connect(
                        r.host, r.port, username="root", client_keys=[key], known_hosts=None
                    ) as conn:
                        assert (await conn.run("echo ok")).stdout.strip() == "ok"
            return live, raw

    live, raw = asyncio.run(run())
    direct = [i for i in live if len(i.ssh_routes) == 2]
    assert 0 < len(direct) < len(live)  # a share of hosts, not all, not none
    by_id = {r["id"]: r for r in raw}
    for inst in live:
        row = by_id[inst.id]
        proxy = next(r for r in inst.ssh_routes if r.kind == "proxy")
        assert (proxy.host, proxy.port) == (row["ssh_host"], row["ssh_port"])
        assert re.fullmatch(r"127\.0\.0\.\d+", proxy.host)
        if len(inst.ssh_routes) == 2:
            d = inst.ssh_routes[0]
            assert d.kind == "direct" and (d.host, str(d.port)) == (
                row["public_ipaddr"],
                row["ports"]["22/tcp"][0]["HostPort"],
            )
            assert (d.host, d.port) != (proxy.host, proxy.port) and d.host != proxy.host
            assert (inst.ssh_host, inst.ssh_port) == (d.host, d.port)  # direct preferred
        else:
            assert not row["ports"] and (inst.ssh_host, inst.ssh_port) == (proxy.host, proxy.port)
    truth = sim.call(sim.market.truth)
    assert {r["id"] for r in truth["instances"] if r["direct_ssh"]} == {i.id for i in direct}


def test_instance_routes_are_never_mixed():
    row = {
        "id": 5,
        "ssh_host": "ssh4.vast.ai",
        "ssh_port": 31022,
        "public_ipaddr": " 203.0.113.9 ",
        "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41311"}]},
        "label": "  lab  ",
    }
    i = parse_instance(row)
    assert [(r.kind, r.host, r.port) for r in i.ssh_routes] == [
        ("direct", "203.0.113.9", 41311),
        ("proxy", "ssh4.vast.ai", 31022),
    ]
    assert (i.ssh_host, i.ssh_port) == ("203.0.113.9", 41311) and i.label == "lab"
    proxy_only = parse_instance({**row, "ports": {}})
    assert (proxy_only.ssh_host, proxy_only.ssh_port) == ("ssh4.vast.ai", 31022)


def test_proxy_drops_and_runner_falls_back(make_sim, tmp_path):
    sim = make_sim(
        seed=8,
        offers=6,
        time_scale=3000,
        host_class=HEALTHY,
        ssh={"direct_share": 1.0, "proxy_drop": 0.5},
    )
    key = asyncssh.generate_private_key("ssh-ed25519")
    runner = SSHRunner(key, connect_timeout=2.0)

    async def run() -> tuple[int, int, Instance]:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            await c.add_ssh_key(runner.public_key)
            offer = (await c.search_offers({}))[0]
            await c.create_instance(offer.id, image="img", disk_gb=10)
            inst = (await _running(c, 1))[0]
            direct, proxy = inst.ssh_routes
            dead = SSHRoute("direct", direct.host, 1)  # a direct route that is firewalled
            runner.set_routes(inst.id, dataclasses.replace(inst, ssh_routes=(dead, proxy)))
            drops = 0
            for _ in range(12):  # given the dead route, every command goes through the proxy
                try:
                    res = await runner.run(inst.id, dead.host or "", 1, "echo hi", timeout=5)
                except SSHFailure:
                    drops += 1
                else:  # a session cut mid-command ends without an exit status
                    drops += res.exit_status is None
            assert runner.route_used[inst.id].kind == "proxy"
            runner.set_routes(inst.id, inst)
            for _ in range(8):  # the direct route never drops
                res = await runner.run(inst.id, direct.host or "", direct.port, "echo hi")
                assert res.stdout == b"hi\n"
            assert runner.route_used[inst.id].kind == "direct"
            return drops, proxy.port, inst

    drops, proxy_port, inst = asyncio.run(run())
    assert 0 < drops < 12  # the proxy drops a share of sessions, not all
    assert sim.ssh is not None and sim.ssh.by_route["direct"] >= 8


def test_ssh_dead_only_when_every_route_failed(make_sim):
    sim = make_sim(
        seed=2,
        offers=3,
        time_scale=3000,
        host_class=[{"behaviour": "ssh_dead", "share": 1}],
        ssh={"direct_share": 1.0},
    )
    runner = SSHRunner(asyncssh.generate_private_key("ssh-ed25519"), connect_timeout=1.5)
    steps: list[tuple[str, int]] = []  # ("try" or "gave up", port), in the order they happened
    connect = runner._connect

    async def connect_seen(iid, host, port, limit):  # type: ignore[no-untyped-def]
        steps.append(("try", port))
        try:
            return await connect(iid, host, port, limit)
        except SSHFailure:
            steps.append(("gave up", port))
            raise

    runner._connect = connect_seen  # type: ignore[method-assign]

    async def run() -> str:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            offer = (await c.search_offers({}))[0]
            await c.create_instance(offer.id, image="img", disk_gb=10)
            inst = (await _running(c, 1))[0]
            runner.set_routes(inst.id, inst)
            with pytest.raises(SSHFailure) as err:
                await runner.run(inst.id, inst.ssh_host or "", inst.ssh_port or 0, "true")
            return str(err.value)

    msg = asyncio.run(run())
    assert "direct" in msg and "proxy" in msg  # both routes were tried before giving up
    # at once, the second a head start behind the first, not after the first's whole timeout
    # (the order of what happened, not how long it took: that measures the box)
    assert [what for what, _ in steps] == ["try", "try", "gave up", "gave up"]


def test_states_build_output_and_market_stops():
    m = _market(
        seed=4,
        offers=10,
        host_class=HEALTHY,
        states={
            "scheduling_share": 1.0,
            "unnamed_share": 1.0,
            "build_output_share": 1.0,
            "contract_end_share": 1.0,
            "contract_end_min": [200, 300],
        },
    )
    inst = m.create(m.machines[0].offer_id, "img", 10, None, {}, None)
    steps = inst.segments[0].steps
    statuses = [s.actual for s in steps]
    assert statuses.index("scheduling") < statuses.index("created") < statuses.index("running")
    assert "provisioning" in statuses
    assert parse_instance({"id": 1, "actual_status": "provisioning"}).known_status == "unknown"
    assert parse_instance({"id": 1, "actual_status": "Scheduling"}).known_status == "scheduling"
    lines = [s.msg for s in steps if s.msg in BUILD_LINES]
    assert len(lines) == 3
    for s in steps:  # a healthy boot never reads as fatal, build output included
        assert fatal_match(s.msg) is None, s.msg
    for _, text in FATAL_TEXTS:  # and the real failures still do
        assert fatal_match(text.format(image="a:b", repo="a")) is not None
    # the contract ends: the market stops (never destroys) the rental, and says so
    end = inst.machine.contract_end
    assert end is not None
    m.clock.advance(end - m.clock.now() + 60)
    truth = m.truth()["instances"][0]
    assert truth["market_stopped_at"] == end and truth["destroyed_at"] is None
    from rentwatch.sim.api_instances import instance_json

    row = parse_instance(instance_json(m, inst, m.clock.now()))
    assert row.status == "stopped" and row.market_stopped
    assert "contract" in (row.status_msg or "")


def test_billing_per_the_docs():
    marks = [
        Mark(0, "create", 1.0, 0.1),
        Mark(600, "running"),
        Mark(1200, "bandwidth", usd=0.02),
        Mark(1800, "offline"),
        Mark(3600, "stop"),
        Mark(7200, "destroy"),
    ]
    c = charges(marks, "running", now=10_000)
    assert abs(c.gpu_usd - 1.0 * 1200 / 3600) < 1e-12  # running -> offline only
    assert abs(c.storage_usd - 0.1 * 1800 / 3600) < 1e-12  # nothing while offline
    assert abs(c.bandwidth_usd - 0.02) < 1e-12 and abs(c.total_usd - (c.gpu_usd + 0.07)) < 1e-9
    what_if = charges(marks, "created", now=10_000)
    assert abs(what_if.gpu_usd - 1.0 * 1800 / 3600) < 1e-12  # from the create, until offline
    stopped = charges([Mark(0, "create", 1.0, 0.1), Mark(3600, "stop")], "running", 7200)
    assert stopped.gpu_usd == 0 and abs(stopped.storage_usd - 0.2) < 1e-12  # storage while stopped


def test_pages_pacing_ids_duration_and_geolocation(make_sim):
    sim = make_sim(seed=6, offers=70, time_scale=60, host_class=HEALTHY)
    sim.api.paced = False

    async def fill() -> list[int]:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            ids = [
                (await c.create_instance(o.id, image="img", disk_gb=10)).instance_id
                for o in (await c.search_offers({}, limit=None))[:60]
            ]
            listed = [i.id for i in await c.list_instances(page_size=100)]
            assert listed == sorted(ids)  # 3 pages of at most 25
            return ids

    ids = asyncio.run(fill())
    hdr = {"Authorization": "Bearer test-key"}
    page = httpx.get(f"{sim.url}/api/v1/instances/?limit=1000", headers=hdr).json()
    assert len(page["instances"]) == 25 and page["next_token"]
    slow = make_sim(seed=6, offers=3, time_scale=1)  # market seconds are wall seconds here
    with httpx.Client(headers=hdr) as h:
        codes = [h.get(f"{slow.url}/api/v1/instances/").status_code for _ in range(9)]
    assert codes[0] == 200 and codes[1:] == [429] * 8  # the interval, with no burst (issue 25)
    later = _market(seed=6, offers=5)
    again = later.create(later.machines[0].offer_id, "img", 10, None, {}, None)
    assert again.id > max(ids)  # a new run never hands out an old id
    offers = httpx.post(f"{sim.url}/api/v0/bundles/", json={}, headers=hdr)
    if offers.status_code == 429:
        time.sleep(0.2)
        offers = httpx.post(f"{sim.url}/api/v0/bundles/", json={}, headers=hdr)
    for o in offers.json()["offers"]:
        assert o["duration"] > 0
        assert re.fullmatch(r"[A-Z][A-Za-z .]+, [A-Z]{2}", o["geolocation"]), o["geolocation"]


def test_official_cli_reads_the_charges(make_sim, tmp_path):
    from tests.test_vastai_cli import vastai

    sim = make_sim(seed=5, offers=5, time_scale=3000, host_class=HEALTHY)
    m = sim.market
    inst = sim.call(lambda: m.create(m.machines[0].offer_id, "img", 40, "lab", {}, None))
    time.sleep(0.5)
    out = vastai(sim, "show", "invoices-v1", "--charges", "--raw", tmp_path=tmp_path)
    import json

    data = json.loads(out[out.index("{") :])
    row = next(r for r in data["results"] if r["source"] == f"instance-{inst.id}")
    truth = sim.call(m.truth)["instances"][0]
    assert row["type"] == "instance" and 0 < row["amount"] <= truth["total_usd"] + 1e-6
    table = vastai(sim, "show", "invoices-v1", "--charges", tmp_path=tmp_path)
    assert str(inst.id) in table


def test_campaign_on_an_unkind_market_abandons_no_healthy_host(make_sim, tmp_path):
    """Issue 19's bar: half the hosts direct, the proxy drops sessions, boots pass through
    `scheduling`, status lines carry build output: the fleet is verified and no healthy
    machine is abandoned. The proxy drops half its sessions (issue 19 asked for 8%): drops are
    drawn per instance id, which changes every run, and on the stepped clock a healthy host
    meets the proxy only in a few preflight sessions, so at 8% most runs met no drop at all."""
    from rentwatch.ledger import Ledger

    from tests.campaigns import run_campaign

    sim = make_sim(
        seed=2,  # one whose fleet reaches hosts by both routes, direct and proxy
        offers=30,
        stepped=True,  # a loaded box must not read as a healthy host's SSH not answering
        host_class=[
            {"behaviour": "healthy", "share": 0.7},
            {"behaviour": "freeze_pull", "share": 0.15},
            {"behaviour": "fatal_pull", "share": 0.15},
        ],
        ssh={"direct_share": 0.5, "proxy_drop": 0.5},
        states={"scheduling_share": 0.6, "build_output_share": 1.0},
    )
    code, ledger = run_campaign(sim, tmp_path, "default", fleet=3)
    assert code == 0
    truth = {r["id"]: r for r in sim.call(sim.market.truth)["instances"]}
    led = Ledger(ledger, read_only=True)
    abandoned = {
        e.instance_id
        for e in led.events(where="kind = 'abandon'")
        if e.detail.get("class") != "cancelled"
    }
    verified = {e.instance_id for e in led.events(where="kind = 'preflight_passed'")}
    led.close()
    assert len(verified) >= 3
    assert all(truth[i]["behaviour"] != "healthy" for i in abandoned), [
        (i, truth[i]["behaviour"]) for i in abandoned
    ]
    assert sim.ssh is not None and sim.ssh.by_route["direct"] > 0 and sim.ssh.by_route["proxy"] > 0


def test_full_list_cost_is_linear(monkeypatch):
    """A full list in pages of 25 builds each live row exactly once (before, every page built
    every row: quadratic in the fleet), skips destroyed ones and loses none."""
    import json

    from rentwatch.sim import api_instances

    def full_list(n: int) -> tuple[int, int]:
        m = _market(seed=1, offers=n, host_class=HEALTHY)
        for machine in m.machines:
            m.create(machine.offer_id, "img", 10, None, {}, None)
        m.destroy(m.instances[m.order[3]])
        built = 0
        real = api_instances.instance_json

        def counting(market, inst, now):
            nonlocal built
            built += 1
            return real(market, inst, now)

        monkeypatch.setattr(api_instances, "instance_json", counting)
        token, ids = None, []
        while True:
            q = {"limit": "100", "order_by": json.dumps([{"col": "id", "dir": "asc"}])}
            if token:
                q["after_token"] = token
            page = json.loads(api_instances.list_v1(m, q, m.clock.now()).body)
            assert len(page["instances"]) <= 25
            ids += [r["id"] for r in page["instances"]]
            token = page["next_token"]
            if not token:
                break
        assert ids == [i for i in m.order if m.instances[i].destroyed_at is None]
        return built, len(ids)

    for n in (200, 1000):
        built, listed = full_list(n)
        assert built == listed == n - 1
