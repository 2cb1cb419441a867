"""The preflight's proof, checked on the controller (issue 30, item 4): each run gets a fresh
nonce, the probe reports the product's entries the nonce picks, and the controller computes
them itself. A forged or replayed document, or one claiming a speed far above the model's, is
not believed; an honest one, from either backend, is."""

from __future__ import annotations

import copy

import pytest
from rentwatch.core.preflight import proof
from rentwatch.core.preflight.verdict import CheckPolicy, preflight_verdict
from rentwatch.engine.hosts.probe_io import preflight_command
from rentwatch.ledger import Ledger

from tests.campaigns import run_campaign
from tests.conftest import CPU_PREFLIGHT_NONCE
from tests.test_preflight_driver import FakeCuda, preflight


def test_the_probe_and_the_controller_pick_the_same_entries():
    for nonce in (1, 7, 2**31 - 2, 123456789):
        for n in (8, 256, 4096):
            assert preflight.sample_positions(nonce, n) == proof.sample_positions(nonce, n)
    assert proof.sample_positions(5, 4096) != proof.sample_positions(6, 4096)
    assert preflight.reference_entry(64, 3, 9) == proof.exact_entry(64, 3, 9)


def test_a_real_run_answers_its_nonce_and_passes(cpu_preflight):
    doc, nonce = cpu_preflight, CPU_PREFLIGHT_NONCE
    mm = doc["matmul"]
    assert mm["nonce"] == nonce and len(mm["samples"]) == proof.SAMPLES
    assert preflight_verdict(doc, "cpu", 0.6, nonce=nonce).ok
    # the same document, answered to another run's nonce: a replay
    v = preflight_verdict(doc, "cpu", 0.6, nonce=nonce + 1)
    assert not v.ok and v.failure_class == "wrong_result" and "nonce" in v.reason


@pytest.mark.parametrize(
    "tamper, words",
    [
        (lambda mm: mm["samples"][3].__setitem__(2, mm["samples"][3][2] + 50), "the product's is"),
        (lambda mm: mm.pop("samples"), "no entries"),
        (lambda mm: mm["samples"].pop(), "7 entries"),
        (lambda mm: mm["samples"][0].__setitem__(0, mm["samples"][0][0] + 1), "other entries"),
        (lambda mm: mm["samples"][1].__setitem__(2, float("nan")), "not a number"),
        (lambda mm: mm["samples"][1].__setitem__(2, "12"), "not a number"),
        (lambda mm: mm.__setitem__("n", 10**9), "matrix size"),
    ],
)
def test_a_doctored_document_is_wrong_result(tamper, words, cpu_preflight):
    doc = copy.deepcopy(cpu_preflight)
    tamper(doc["matmul"])
    v = preflight_verdict(doc, "cpu", 0.6, nonce=CPU_PREFLIGHT_NONCE)
    assert not v.ok and v.failure_class == "wrong_result" and words in v.reason, v.reason


def test_the_driver_path_answers_its_nonce_exactly():
    doc = preflight.run_driver(24, 1, preflight.Driver(FakeCuda()), nonce=31337)
    mm = doc["matmul"]
    assert doc["ok"] and mm["nonce"] == 31337
    assert proof.check_samples(mm, 31337, "driver") is None
    off = copy.deepcopy(mm)
    off["samples"][0][2] += 0.5  # fp32 sums of integers are exact: any difference is a lie
    assert "the product's is" in (proof.check_samples(off, 31337, "driver") or "")
    r, c, _ = mm["samples"][0]
    want = proof.exact_entry(24, r, c)
    rounded = [[r, c, want + 0.01 * max(1, abs(want))], *mm["samples"][1:]]  # bf16 rounds so
    assert proof.check_samples({**mm, "samples": rounded}, 31337, "torch") is None


def test_a_speed_far_above_the_models_is_not_believed(cpu_preflight):
    doc = copy.deepcopy(cpu_preflight)
    doc["device"]["name"] = "NVIDIA GeForce RTX 4090"
    doc["matmul"]["tflops"] = 165.2 * 1.41
    v = preflight_verdict(doc, "RTX 4090", 0.6, nonce=CPU_PREFLIGHT_NONCE)
    assert not v.ok and v.failure_class == "bad_probe" and "not believable" in v.reason
    doc["matmul"]["tflops"] = 165.2 * 1.02
    assert preflight_verdict(doc, "RTX 4090", 0.6, nonce=CPU_PREFLIGHT_NONCE).ok


def test_the_command_carries_the_nonce():
    cmd = preflight_command(CheckPolicy(), None, 77)
    assert cmd.startswith("python3 - --nonce 77")


def test_hosts_that_forge_their_preflight_are_never_verified(make_sim, tmp_path):
    """Every CUDA call fails on these hosts, and each prints a good document replayed from
    another run. Before the proof they were verified (and so safe from automated destroy)."""
    sim = make_sim(
        seed=3,
        offers=30,
        time_scale=300,
        host_class=[
            {"behaviour": "forged_preflight", "share": 0.5},
            {"behaviour": "healthy", "share": 0.5},
        ],
    )
    code, ledger = run_campaign(sim, tmp_path, "default", fleet=2, max_creates=12)
    led = Ledger(ledger)
    machines = sim.call(
        lambda: {i: inst.machine.behaviour for i, inst in sim.market.instances.items()}
    )
    verified = {e.instance_id for e in led.events(where="kind = 'preflight_passed'")}
    forged = {i for i, b in machines.items() if b == "forged_preflight"}
    assert forged, "the market rented no forging host: the test proves nothing"
    assert not verified & forged, "a forged preflight was believed"
    failed = led.events(where="kind = 'preflight_failed'")
    assert {e.instance_id for e in failed} & forged
    assert all(
        "does not answer this run's nonce" in e.reason for e in failed if e.instance_id in forged
    )
    assert code == 0 and len(verified) >= 2
