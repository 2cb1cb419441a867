"""The on-host probes, run for real where they can be (preflight on the CPU, the NVML sampler
against a stand-in for pynvml), and the controller's handling of hostile probe output."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import asyncssh
import pytest
from rentwatch.core.preflight.verdict import detect_throttle, preflight_verdict
from rentwatch.engine.hosts.probe_io import ProbeError, parse_probe_output
from rentwatch.engine.hosts.ssh import SSHFailure, SSHRunner
from rentwatch.market.vast.client import VastClient
from rentwatch.probes import nvml_sample

PROBES = Path(__file__).resolve().parent.parent / "probes"


def test_real_preflight_on_cpu_passes_the_validator(cpu_preflight):
    doc = cpu_preflight
    assert doc["ok"] and doc["matmul"]["result_ok"] and doc["matmul"]["max_rel_err"] <= 0.02
    assert set(doc["steps"]) >= {"cuda_init_s", "alloc_s", "warmup_s", "timed_s", "check_s"}
    # judged against a GPU model, a CPU is "too slow": the verdict path works end to end
    v = preflight_verdict(doc, "cpu", 0.6, check_name=True)
    assert v.ok  # unknown model: no speed expectation, name matches
    v = preflight_verdict(
        {**doc, "device": {**doc["device"], "name": "NVIDIA GeForce RTX 4090"}}, "RTX 4090", 0.6
    )
    assert not v.ok and v.failure_class == "too_slow"


def test_preflight_catches_a_card_that_returns_garbage(monkeypatch):
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(PROBES))
    import preflight

    real_matmul = torch.Tensor.__matmul__
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: real_matmul(a, b) + 1)
    doc = preflight.run(128, 1, "cpu")
    assert (
        doc["ok"] is False
        and doc["matmul"]["result_ok"] is False
        and doc["error"]["type"] == "WrongResult"
    )
    assert preflight_verdict(doc, "RTX 3090", 0.6).failure_class == "cuda_error"


class _NVMLError(Exception):
    pass


class FakeNVML:
    """Mimics pynvml's functions; some raise NotSupported, one is missing (old driver)."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, reasons: int, sm: int = 1500, util: int = 98, old: bool = False):
        self.reasons, self.sm, self.util = reasons, sm, util
        if not old:
            self.nvmlDeviceGetCurrentClocksEventReasons = lambda h: self.reasons

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return object()

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA GeForce RTX 4090"

    def nvmlSystemGetDriverVersion(self):
        return "550.54.14"

    def nvmlDeviceGetUtilizationRates(self, h):
        return type("U", (), {"gpu": self.util, "memory": 40})()

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("M", (), {"used": 18 * 2**30, "total": 24 * 2**30})()

    def nvmlDeviceGetClockInfo(self, h, t):
        return self.sm

    def nvmlDeviceGetMaxClockInfo(self, h, t):
        return 2520

    def nvmlDeviceGetTemperature(self, h, s):
        return 84

    def nvmlDeviceGetPowerUsage(self, h):
        raise _NVMLError("NVMLError_NotSupported")

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 450_000

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 4

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return 16


def _sample(fake, capsys) -> dict:
    assert nvml_sample.main([], nv=fake) == 0
    return parse_probe_output(capsys.readouterr().out.encode(), "nvml_sample")["samples"][0]


class DatacenterNVML(FakeNVML):
    """A board with a fan, ECC and page retirement (a datacenter card before Ampere)."""

    def nvmlDeviceGetFanSpeed(self, h):
        return 47

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter):
        assert counter == 0  # volatile: since the driver loaded
        return {0: 12, 1: 0}[error_type]

    def nvmlDeviceGetRetiredPages(self, h, cause):
        return [0x1000, 0x2000] if cause == 0 else [0x3000]


def test_nvml_sample_reads_vital_signs_and_absent_ones_are_null(capsys):
    s = _sample(DatacenterNVML(0), capsys)
    assert (s["mem_used_mb"], s["mem_total_mb"], s["temp"]) == (18432, 24576, 84)
    assert (s["fan_pct"], s["ecc_corrected"], s["ecc_uncorrected"], s["retired_pages"]) == (
        47,
        12,
        0,
        3,
    )
    # a consumer card: no fan reading, no ECC, no page retirement (NotSupported or missing)
    consumer = FakeNVML(0)

    def unsupported(*a):
        raise _NVMLError("NVMLError_NotSupported")

    consumer.nvmlDeviceGetFanSpeed = unsupported
    consumer.nvmlDeviceGetTotalEccErrors = unsupported
    consumer.nvmlDeviceGetRetiredPages = unsupported
    c = _sample(consumer, capsys)
    assert [c[k] for k in ("fan_pct", "ecc_corrected", "ecc_uncorrected", "retired_pages")] == [
        None
    ] * 4


def test_nvml_sample_decodes_reasons_and_degrades(capsys):
    s = _sample(FakeNVML(0x20 | 0x8), capsys)
    assert s["reasons"] == ["hw_slowdown", "sw_thermal_slowdown"] and s["power_w"] is None
    assert (
        s["power_limit_w"] == 450.0
        and s["mem_total_mb"] == 24576
        and s["name"] == "NVIDIA GeForce RTX 4090"
    )
    # an old driver without the clocks-event call: the throttle-reasons call is used instead
    old = FakeNVML(0x4, old=True)
    old.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x4
    assert _sample(old, capsys)["reasons"] == ["sw_power_cap"]
    # neither call: nulls, not a crash
    assert _sample(FakeNVML(0, old=True), capsys)["reasons"] is None


@pytest.mark.parametrize(
    "samples, throttled",
    [
        (
            [{"util": 98, "sm_clock": 1960, "max_sm_clock": 2520, "reasons": ["hw_slowdown"]}] * 5,
            True,
        ),
        ([{"util": 98, "sm_clock": 2500, "max_sm_clock": 2520, "reasons": []}] * 5, False),
        (
            [{"util": 0, "sm_clock": 210, "max_sm_clock": 2520, "reasons": ["gpu_idle"]}] * 5,
            False,
        ),  # idle
        (
            [{"util": 98, "sm_clock": 1500, "max_sm_clock": 2520, "reasons": ["gpu_idle"]}] * 5,
            False,
        ),  # no reason
        (
            [
                {
                    "util": 98,
                    "sm_clock": 1900,
                    "max_sm_clock": 2520,
                    "reasons": ["sw_thermal_slowdown"],
                }
            ]
            + [{"util": 98, "sm_clock": 2500, "max_sm_clock": 2520, "reasons": []}] * 4,
            False,
        ),  # a blip
        ([], False),
    ],
)
def test_throttle_detection(samples, throttled):
    t = detect_throttle(samples)
    assert t.throttled is throttled
    if throttled:
        assert t.slowdown == pytest.approx(1 - 1960 / 2520) and "hw_slowdown" in t.reason


@pytest.mark.parametrize(
    "raw, why",
    [
        (b"", "nothing"),
        (b"not json at all", "did not print JSON"),
        (b"\x1b[2J\x1b[31mboom", "did not print JSON"),
        (b'{"probe": "preflight", "schema": 99}', "wrong shape"),
        (b"[1, 2]", "wrong shape"),
        (b"x" * 300_000, "cut off"),
    ],
)
def test_hostile_probe_output(raw, why):
    with pytest.raises(ProbeError, match=why):
        parse_probe_output(raw, "preflight")


def test_hostile_host_over_real_ssh(make_sim):
    """Floods are cut at the cap, a probe that never exits hits the timeout, and a host that
    accepts and stalls fails the connect within its timeout."""
    sim = make_sim(
        seed=4,
        offers=6,
        time_scale=3000,
        host_class=[
            {"behaviour": "healthy", "share": 0.5},
            {"behaviour": "ssh_dead", "share": 0.5},
        ],
    )
    key = asyncssh.generate_private_key("ssh-ed25519")
    runner = SSHRunner(key, connect_timeout=1.0, max_output=64 * 1024)

    async def run() -> None:
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            await c.add_ssh_key(runner.public_key)
            by_behaviour = {m.behaviour: m.offer_id for m in sim.market.machines}
            ids = {
                b: (await c.create_instance(o, image="img", disk_gb=10)).instance_id
                for b, o in by_behaviour.items()
            }
            deadline = time.monotonic() + 30
            insts = {}
            while time.monotonic() < deadline and len(insts) < 2:
                insts = {
                    b: i
                    for b in ids
                    for i in [await c.show_instance(ids[b])]
                    if i and i.status == "running" and i.ssh_port
                }
                await asyncio.sleep(0.1)
            h = insts["healthy"]
            res = await runner.run(
                h.id, h.ssh_host, h.ssh_port, "python3 -c \"print('y' * 5_000_000)\"", timeout=10
            )
            assert res.truncated and len(res.stdout) == 64 * 1024
            with pytest.raises(ProbeError, match="cut off"):
                parse_probe_output(res.stdout, "preflight", res.truncated)
            # cut at its own timeout (the error says so), not waited out: a 30 s sleep that
            # ended by itself would raise nothing
            with pytest.raises(SSHFailure, match="did not finish within 1s"):
                await runner.run(h.id, h.ssh_host, h.ssh_port, "sleep 30", timeout=1.0)
            d = insts["ssh_dead"]
            with pytest.raises(SSHFailure, match="no SSH answer"):
                await runner.run(d.id, d.ssh_host, d.ssh_port, "true", timeout=5)

    asyncio.run(run())


def test_host_key_change_is_refused():
    from rentwatch.engine.hosts.ssh import HostKeyChanged

    runner = SSHRunner(asyncssh.generate_private_key("ssh-ed25519"))
    runner.pinned[7] = "SHA256:old"

    class Conn:
        def get_server_host_key(self):
            return asyncssh.generate_private_key("ssh-ed25519")

        def close(self):
            self.closed = True

    async def fake_connect(*a, **k):
        return Conn()

    import rentwatch.engine.hosts.ssh as mod

    orig = mod.asyncssh.connect
    mod.asyncssh.connect = fake_connect
    try:
        with pytest.raises(HostKeyChanged):
            asyncio.run(runner._connect(7, "h", 22, 1.0))
    finally:
        mod.asyncssh.connect = orig
    assert json.dumps(runner.pinned)


class _Lost(Exception):
    value = 15  # NVML_ERROR_GPU_IS_LOST


class EventNVML(FakeNVML):
    """pynvml with an event set holding an XID 79, or a GPU that NVML reports lost."""

    def __init__(self, events=((0x8, 79),), lost=False, no_events=False):
        super().__init__(0)
        self.events, self.lost = list(events), lost
        if not no_events:
            self.nvmlEventSetCreate = lambda: "set"
            self.nvmlDeviceRegisterEvents = lambda h, mask, es: None
            self.nvmlEventSetWait_v2 = self._wait

    def _wait(self, es, ms):
        if not self.events:
            raise _NVMLError("NVMLError_Timeout")
        kind, xid = self.events.pop(0)
        return type("E", (), {"eventType": kind, "eventData": xid})()

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        if self.lost:
            raise _Lost("GPU is lost")
        return 1

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16


def _doc(fake, capsys, *args):
    assert nvml_sample.main(["--events-ms", "0", *args], nv=fake) == 0
    return parse_probe_output(capsys.readouterr().out.encode(), "nvml_sample")


def test_nvml_sample_reports_xid_events_link_and_a_lost_gpu(capsys):
    from rentwatch.core.preflight.checks import xid_check

    doc = _doc(EventNVML(), capsys)
    assert doc["xid"] == {
        "supported": True,
        "events": [{"type": "xid", "xid": 79}],
        "gpu_lost": False,
    }
    s = doc["samples"][0]
    assert (s["pcie_width"], s["pcie_max_width"], s["pcie_max_gen"]) == (1, 16, None)
    assert xid_check(doc).failure_class == "xid"
    lost = _doc(EventNVML(events=(), lost=True), capsys)
    assert lost["xid"]["gpu_lost"] is True and xid_check(lost).ok is False
    old = _doc(EventNVML(no_events=True), capsys)  # a driver without event sets
    assert old["xid"]["supported"] is False and xid_check(old).ok is None
    quiet = _doc(EventNVML(events=()), capsys)
    assert xid_check(quiet).ok is True


class _WatchLib:
    """libnvidia-ml's calls the watchdog's XID thread makes: an XID 48, then the GPU is lost."""

    def __init__(self, rcs=((0, 0x8, 48), (10, 0, 0), (15, 0, 0))):
        self.rcs = list(rcs)

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetCount_v2(self, n):
        n._obj.value = 1
        return 0

    def nvmlEventSetCreate(self, es):
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, i, h):
        return 0

    def nvmlDeviceRegisterEvents(self, h, mask, es):
        return 0

    def nvmlEventSetWait_v2(self, es, data, ms):
        rc, kind, xid = self.rcs.pop(0) if self.rcs else (10, 0, 0)
        data._obj.eventType, data._obj.eventData = kind, xid
        return rc


def test_watchdog_logs_xids_for_the_sampler_to_report(tmp_path, capsys):
    from rentwatch.core.preflight.checks import xid_check
    from rentwatch.probes import watchdog

    log = tmp_path / "xid.jsonl"
    said = []
    watchdog.watch_xids(str(log), said.append, lib=_WatchLib(), rounds=10)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(e["type"], e["xid"]) for e in lines] == [("xid", 48), ("gpu_lost", 79)]
    assert said == ["xid watch: GPU is lost"]
    # no NVML at all: one line in the watchdog's log, no exception
    watchdog.watch_xids(str(tmp_path / "none.jsonl"), said.append, lib=object(), rounds=1)
    assert said[-1].startswith("xid watch off")
    # the sampler reports what the watchdog logged, garbage lines skipped
    with log.open("a") as f:
        f.write('not json\n{"xid": "79; rm -rf /"}\n')
    assert nvml_sample.main(["--xid-log", str(log)], nv=FakeNVML(0)) == 0
    doc = parse_probe_output(capsys.readouterr().out.encode(), "nvml_sample")
    assert doc["xid"]["gpu_lost"] is True and len(doc["xid"]["events"]) == 2
    assert xid_check(doc).failure_class == "xid"
    assert nvml_sample.main(["--xid-log", str(tmp_path / "missing")], nv=FakeNVML(0)) == 0
    doc = parse_probe_output(capsys.readouterr().out.encode(), "nvml_sample")
    assert doc["xid"] == {"supported": False, "events": [], "gpu_lost": False}
