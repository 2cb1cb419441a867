"""The simulator's new host behaviours and its image catalogue: a scenario naming them parses,
the probes' answers carry what the real probes would print on such a host, and the default
check policy catches each faulty behaviour and passes every healthy host."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import asyncssh
import pytest
from rentwatch.core.blame.fault import Evidence, Failure, Party, Stage, blame
from rentwatch.core.errors import ConfigError
from rentwatch.core.preflight.checks import deep_checks, first_failure, xid_check
from rentwatch.core.preflight.verdict import CheckPolicy, preflight_verdict
from rentwatch.engine.hosts.probe_io import parse_probe_output, probe_source
from rentwatch.engine.hosts.ssh import SSHRunner
from rentwatch.market.vast.client import VastClient
from rentwatch.sim import probe_answers as probes
from rentwatch.sim.images import ImageSpec, image_facts
from rentwatch.sim.market import SimClock, SimMarket
from rentwatch.sim.scenario import ALL_BEHAVIOURS, parse_scenario

NEW = ("narrow_pcie", "short_vram", "slow_disk", "slow_net", "xid_mid_job")
CAUGHT_BY = {
    "narrow_pcie": "narrow_pcie",
    "short_vram": "short_vram",
    "slow_disk": ("slow_disk", "small_disk"),
    "slow_net": "slow_net",
}


def _scenario(**extra):
    return parse_scenario(
        {
            "seed": 11,
            "offers": 60,
            "host_class": [{"behaviour": b, "share": 1.0} for b in ("healthy", *NEW)],
            **extra,
        }
    )


def test_a_scenario_with_the_new_behaviours_and_images_parses():
    sc = _scenario(
        image=[
            {"name": "acme/private:*", "pullable": False},
            {"name": "ghcr.io/nvidia/jax:*", "python": True, "torch": False, "cuda": "12.4"},
        ]
    )
    assert set(NEW) <= set(ALL_BEHAVIOURS) and set(sc.shares()) == {"healthy", *NEW}
    assert sc.images[0] == ImageSpec("acme/private:*", True, True, None, False)
    m = SimMarket(sc)
    assert {x.behaviour for x in m.machines} == {"healthy", *NEW}
    slow_net = next(x for x in m.machines if x.behaviour == "slow_net")
    assert slow_net.knobs["pull_min"] == [40.0, 90.0]  # its pull drags too


@pytest.mark.parametrize(
    "raw, match",
    [
        ({"image": {"name": "x"}}, "one or more"),
        ({"image": [{"python": True}]}, "name"),
        ({"image": [{"name": "x", "torch": "yes"}]}, "true or false"),
        ({"image": [{"name": "x", "cuda": 12.4}]}, "version"),
        ({"image": [{"name": "x", "registry": "y"}]}, "unknown key"),
        ({"image": [{"name": "x", "python": False, "torch": True}]}, "without python3"),
    ],
)
def test_bad_image_tables_are_refused(raw, match):
    with pytest.raises(ConfigError, match=match):
        parse_scenario(raw)


def test_an_unknown_behaviour_is_refused_with_the_full_list():
    with pytest.raises(ConfigError, match="xid_mid_job"):
        parse_scenario({"host_class": [{"behaviour": "haunted", "share": 1.0}]})


@pytest.mark.parametrize(
    "image, python, torch, cuda",
    [
        ("pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime", True, True, "12.4"),
        ("nvidia/cuda:12.4.1-runtime-ubuntu22.04", False, False, "12.4"),
        ("ghcr.io/nvidia/jax:jax-2024-10-01", True, False, None),
        ("tensorflow/tensorflow:2.17.0-gpu", True, False, None),
        ("acme/trainer:v3", True, True, None),  # custom: python3 and torch, as before
    ],
)
def test_image_defaults(image, python, torch, cuda):
    f = image_facts(image)
    assert (f.python, f.torch, f.cuda, f.pullable) == (python, torch, cuda, True)
    # the scenario's own entries come first
    assert image_facts(image, (ImageSpec("*", python=False, torch=False),)).python is False


def test_an_unpullable_image_fails_every_hosts_pull_with_the_registrys_denial():
    sc = _scenario(image=[{"name": "acme/private:*", "pullable": False}])
    clock = SimClock(1.0, origin=1_000_000.0)
    m = SimMarket(sc, clock)
    healthy = [x for x in m.machines if x.behaviour == "healthy"][:3]
    insts = [m.create(x.offer_id, "acme/private:1", 20, None, {}, None) for x in healthy]
    other = m.create(m.machines[-1].offer_id, "pytorch/pytorch:latest", 20, None, {}, None)
    clock.advance(3 * 3600)
    failures = []
    for inst in insts:
        actual, msg = inst.status(clock.now())
        assert actual == "loading" and "pull access denied for acme/private" in (msg or "")
        assert inst.segments[-1].running_at is None and not inst.running(clock.now())
        failures.append(Failure(inst.machine.id, inst.image, Stage.PULL, msg or ""))
    assert other.segments[-1].running_at is not None  # other images pull as before
    # blame: suspect on the first machine, the campaign's on the second
    assert blame(failures[0]).party is Party.SUSPECT
    assert blame(failures[1], Evidence((failures[0],))).party is Party.CAMPAIGN
    # a stopped and restarted instance of that image fails the same way
    m.stop(insts[0])
    m.start(insts[0])
    clock.advance(3600)
    assert "pull access denied" in (insts[0].status(clock.now())[1] or "")


def test_an_unpullable_image_leaves_other_images_boots_alone():
    def boot(sc):
        clock = SimClock(1.0, origin=1.0)
        clock.stepped(1.0)
        m = SimMarket(sc, clock)
        return m.create(m.machines[0].offer_id, "pytorch/pytorch:x", 20, None, {}, None).segments

    denied = _scenario(image=[{"name": "acme/private:*", "pullable": False}])
    assert boot(denied) == boot(_scenario())


def _answers(m: SimMarket, inst, command: str = "python3 - --net-url https://x", at: float = 0):
    pre = probes.preflight_document(m, inst, command, at)
    return pre, probes.nvml_document(m, inst, at), probes.xid_at(11, inst)


@pytest.mark.parametrize("image", ["pytorch/pytorch:2.4.0-cuda12.4", "ghcr.io/nvidia/jax:latest"])
def test_default_policy_catches_each_new_behaviour_with_no_false_kill(image):
    sc = _scenario()
    clock = SimClock(1.0, origin=1_000_000.0)
    m = SimMarket(sc, clock)
    policy = CheckPolicy()
    seen = {b: 0 for b in ("healthy", *NEW)}
    for mach in m.machines:
        inst = m.create(mach.offer_id, image, 20, None, {}, None)
        running = inst.segments[-1].running_at
        assert running is not None
        pre, nvml, lost_at = _answers(m, inst, at=running + 60)
        raw = parse_probe_output((__import__("json").dumps(pre) + "\n").encode(), "preflight")
        v = preflight_verdict(raw, mach.advertised_gpu, 0.6, checks=policy)
        assert v.ok, (mach.behaviour, v.reason)  # every one of them computes
        assert raw["backend"] == ("driver" if "jax" in image else "torch")
        offer = mach.offer_json(20, running + 60, m.min_bid(mach, running + 60), mach.offer_id)
        failed = first_failure(deep_checks(raw, offer, 20, policy))
        b = mach.behaviour
        seen[b] += 1
        if b in ("healthy", "xid_mid_job"):
            assert failed is None, (b, failed)  # 0 false kills; the XID comes later
        else:
            want = CAUGHT_BY[b]
            assert failed is not None and failed.failure_class in (
                want if isinstance(want, tuple) else (want,)
            ), (b, failed)
        if b == "xid_mid_job":
            assert lost_at is not None and lost_at > running + 60
            assert xid_check(nvml).ok is None  # a sample without --events-ms: no verdict yet
            _, later, _ = _answers(m, inst, at=lost_at + 1)
            assert xid_check(later).failure_class == "xid"
            pre_later, _, _ = _answers(m, inst, at=lost_at + 1)
            assert pre_later["ok"] is False and xid_check(pre_later).ok is False
        else:
            assert lost_at is None
        m.destroy(inst)
    assert all(seen.values()), seen


def test_narrow_pcie_shows_in_the_nvml_samples_too():
    sc = _scenario()
    m = SimMarket(sc, SimClock(1.0, origin=1.0))
    mach = next(x for x in m.machines if x.behaviour == "narrow_pcie")
    inst = m.create(mach.offer_id, "img", 20, None, {}, None)
    _, nvml, _ = _answers(m, inst)
    s = nvml["samples"][0]
    assert s["pcie_width"] <= 2 and s["pcie_max_width"] == 16


def test_over_ssh_an_image_without_python_answers_like_a_shell_and_jax_uses_the_driver(make_sim):
    sim = make_sim(
        seed=5,
        offers=4,
        time_scale=3000,
        host_class=[{"behaviour": "healthy", "share": 1.0}],
    )
    key = asyncssh.generate_private_key("ssh-ed25519")
    runner = SSHRunner(key, connect_timeout=2.0)

    async def run() -> None:
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            await c.add_ssh_key(runner.public_key)
            offers = [m.offer_id for m in sim.market.machines]
            images = {
                "cuda": "nvidia/cuda:12.4.1-runtime-ubuntu22.04",
                "jax": "ghcr.io/nvidia/jax:x",
            }
            ids = {
                k: (await c.create_instance(offers[i], image=img, disk_gb=10)).instance_id
                for i, (k, img) in enumerate(images.items())
            }
            deadline = time.monotonic() + 60
            insts: dict = {}
            while time.monotonic() < deadline and len(insts) < 2:
                insts = {
                    k: i
                    for k in ids
                    for i in [await c.show_instance(ids[k])]
                    if i and i.status == "running" and i.ssh_port
                }
                await asyncio.sleep(0.1)
            script = probe_source("preflight")
            h = insts["cuda"]
            res = await runner.run(
                h.id, h.ssh_host, h.ssh_port, "python3 -", stdin=script, timeout=10
            )
            assert res.exit_status == 127 and b"python3: command not found" in res.stderr
            said = Failure(1, images["cuda"], Stage.PROBE, res.stderr.decode(), res.exit_status)
            b = blame(said)  # one machine: suspected; a second decides (issue 30)
            assert b.party is Party.SUSPECT and b.cause == "no_python" and not b.quarantine
            b = blame(replace(said, machine_id=2), Evidence().failed(said))
            assert b.party is Party.CAMPAIGN and b.cause == "no_python" and not b.quarantine
            j = insts["jax"]
            res = await runner.run(
                j.id, j.ssh_host, j.ssh_port, "python3 -", stdin=script, timeout=10
            )
            doc = parse_probe_output(res.stdout, "preflight", res.truncated)
            assert doc["backend"] == "driver" and doc["ok"] is True
            assert preflight_verdict(doc, sim.market.machines[1].advertised_gpu, 0.6).ok

    asyncio.run(run())


def test_a_campaign_whose_image_lacks_torch_verifies_its_fleet_through_the_driver_path(
    make_sim, tmp_path
):
    """End to end with today's supervisor: the scenario says the campaign's image has no
    torch, so every preflight runs the driver path; the fleet is verified on it and no
    healthy machine is destroyed or quarantined."""
    from rentwatch.ledger import Ledger

    from .campaigns import run_campaign

    sim = make_sim(
        seed=3,
        offers=12,
        time_scale=240,
        host_class=[{"behaviour": "healthy", "share": 1.0}],
        image=[{"name": "pytorch/pytorch:*", "python": True, "torch": False}],
    )
    code, ledger = run_campaign(sim, tmp_path, "default", fleet=2)
    assert code == 0
    led = Ledger(ledger)
    passed = led.events(where="kind = 'preflight_passed'")
    assert len(passed) >= 2 and all("driver API" in (e.reason or "") for e in passed)
    assert not led.events(where="kind IN ('preflight_failed', 'quarantine')")
    led.close()
