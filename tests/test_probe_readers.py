"""Every probe reader turns any input into a verdict or a failed sample, never an exception
(issue 30, item 2): a host's preflight document, its NVML samples and its shell's answers are
evidence, and one hostile line must not end the task that watches the rental. Hypothesis throws
arbitrary JSON, huge numbers, wrong types, NaN and escapes at each reader; then the preflight
and tend tasks are run against a link that answers with them, or raises what nobody expected."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rentwatch.core.decisions import Abandon, AttemptView, FleetSnapshot
from rentwatch.core.lifecycle import Phase
from rentwatch.core.policy import DEFAULT
from rentwatch.core.preflight.checks import (
    deep_checks,
    disk_check,
    net_check,
    pcie_check,
    probe_net_mbps,
    vram_check,
    xid_check,
)
from rentwatch.core.preflight.verdict import CheckPolicy, detect_throttle, preflight_verdict
from rentwatch.core.rules import decide
from rentwatch.engine.hosts.probe_io import (
    ProbeError,
    load_host_json,
    parse_probe_output,
)
from rentwatch.ledger import Ledger

from tests.fuzzing import examples
from tests.test_empty_answers import ScriptedLink, attempt, job_work, proven, said, tender_on

HUGE = 10**5000  # json.loads of its text raises a plain ValueError (over 4,300 digits)
HUGE_TEXT = "9" * 5000
BIG = 10**400  # under the digit limit, but float() of it raises OverflowError

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(range(5)).map(lambda i: (HUGE, BIG, -BIG, 2**63, -(2**63) - 1)[i])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["\x1b[31m", "[bold]x[/]", "\u202e", "\x00", "\x9b"])
)
values = st.recursive(
    scalars,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=12,
)
SECTIONS = ["probe", "schema", "ok", "matmul", "device", "error", "backend", "pcie", "vram"]
SECTIONS += ["disk", "net", "xid", "samples", "total_s"]
FIELDS = ["tflops", "result_ok", "max_rel_err", "name", "width", "max_width", "h2d_gbps"]
FIELDS += ["allocated_mb", "free_gb", "write_mb_s", "mbps", "events", "gpu_lost", "supported"]
FIELDS += ["util", "sm_clock", "max_sm_clock", "reasons", "reasons_bits", "temp", "xid", "type"]
FIELDS += ["mem_used_mb", "mem_total_mb", "power_w", "power_limit_w", "fan_pct", "retired_pages"]
section = st.dictionaries(st.sampled_from(FIELDS), values, max_size=6) | values
documents = st.dictionaries(st.sampled_from(SECTIONS), section, max_size=8)


def _printable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _printable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_printable(x) for x in v]
    return "__HUGE__" if v is HUGE else v


def dumps(doc: Any) -> str:
    """A document as a host may print it: Python's JSON (NaN, Infinity), any integer."""
    return json.dumps(_printable(doc)).replace('"__HUGE__"', HUGE_TEXT)


def _text_of(doc: Any) -> str:
    return dumps(doc) if not isinstance(doc, str) else doc


lines = (
    documents.map(lambda d: {"probe": "preflight", "schema": 1, **d}).map(_text_of)
    | documents.map(_text_of)
    | st.sampled_from(
        [
            '{"probe": "preflight", "schema": 1, "ok": true, "total_s": ' + HUGE_TEXT + "}",
            "[" * 60_000,
            '{"a": ' * 5000 + "1" + "}" * 5000,
            '{"probe": "nvml_sample", "schema": 1, "samples": [{"reasons": true}]}',
            '{"probe": "preflight", "schema": true, "ok": true}',
            "NaN",
            '"\\ud800"',
            "\x1b]0;title\x07{}",
        ]
    )
    | st.text(max_size=200)
)


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines, st.sampled_from(["preflight", "nvml_sample"]), st.binary(max_size=50))
def test_any_output_is_a_document_or_a_probe_error(line, probe, noise):
    raw = noise + b"\n" + line.encode("utf-8", errors="surrogatepass")
    try:
        doc = parse_probe_output(raw, probe)
    except ProbeError as exc:
        assert str(exc)
        return
    assert isinstance(doc, dict) and doc["probe"] == probe


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents, st.sampled_from(["RTX 4090", "RTX 3090", "H100 SXM"]), st.booleans())
def test_any_preflight_document_gets_a_verdict(doc, gpu, name_check):
    v = preflight_verdict({"probe": "preflight", "schema": 1, **doc}, gpu, 0.6, name_check)
    assert v.ok in (True, False) and isinstance(v.reason, str) and len(v.reason) < 1000
    assert v.ok or v.failure_class


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents | values, values, values, values)
def test_every_deep_check_reads_any_document(doc, ram, disk, bw):
    policy = CheckPolicy()
    offer = {"gpu_name": "RTX 4090", "gpu_ram": ram, "disk_bw": bw, "inet_down": disk}
    checks = deep_checks(doc, offer, 40.0, policy)
    checks += [
        pcie_check(doc, "RTX 4090", policy),
        vram_check(doc, ram, policy),
        disk_check(doc, disk, bw, policy),
        net_check(probe_net_mbps(doc), disk, policy),
        net_check(ram, bw, policy),
        xid_check(doc),
    ]
    assert all(c.ok in (True, False, None) and isinstance(c.reason, str) for c in checks)


@settings(max_examples=examples(1500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(st.sampled_from(FIELDS), values, max_size=5) | values, max_size=8))
def test_any_samples_give_a_throttle_reading(samples):
    assert detect_throttle(samples).throttled in (True, False)  # type: ignore[arg-type]


from tests.test_blame import probe_run_blame  # noqa: E402


@settings(max_examples=examples(1000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines, st.text(max_size=100), st.none() | st.integers(-(2**40), 2**40))
def test_any_probe_run_is_blamed_or_not(line, err, code):
    found = probe_run_blame(7, "img", code, line.encode(), err.encode())
    assert found is None or found.reason


def test_a_long_integer_and_deep_nesting_are_no_document():
    with pytest.raises(ValueError):
        json.loads(HUGE_TEXT)  # why: not a JSONDecodeError, which the reader used to catch
    assert load_host_json(HUGE_TEXT) == float("inf")
    for text in ("[" * 60_000, '{"a": ' * 5000 + "1" + "}" * 5000):
        with pytest.raises(ValueError):
            load_host_json(text)


def tender_for(link: ScriptedLink, ledger: Ledger | None = None):
    work, _, ledger = job_work(link, ledger=ledger)
    tender = tender_on(link, work)
    return tender, ledger


@pytest.fixture(scope="module")
def samples_ledger() -> Iterator[Ledger]:
    """One in-memory ledger that every example of the property below writes into: opening one
    (its views bound) costs more CPU than the example it serves."""
    ledger = Ledger(":memory:")
    yield ledger
    ledger.close()


sample_docs = st.dictionaries(
    st.sampled_from(["samples", "xid"]),
    st.lists(st.dictionaries(st.sampled_from(FIELDS), values, max_size=8) | values, max_size=6)
    | values,
)


@settings(max_examples=examples(600), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sample_docs)
def test_any_sampler_document_is_taken_or_refused_whole(samples_ledger, doc):
    """take_samples (the ledger's samples table included) and the XID check read anything."""
    tender, _ = tender_for(ScriptedLink([said("")]), samples_ledger)
    a = attempt()
    tender.take_samples(a, {"probe": "nvml_sample", "schema": 1, **doc})
    asyncio.run(tender.check_xid(a, {"probe": "nvml_sample", "schema": 1, **doc}))
    assert all(set(r) >= {"util", "reasons"} for r in a.samples)


def test_a_sample_whose_reasons_are_true_is_taken_not_raised():
    tender, ledger = tender_for(ScriptedLink([said("")]))
    a = attempt()
    for bad in (True, 5, BIG, {"x": 1}):
        doc = {"samples": [{"util": 90, "sm_clock": BIG, "reasons": bad, "reasons_bits": 2**70}]}
        tender.take_samples(a, doc)
    assert a.samples and all(r["reasons"] == [] and r["sm_clock"] is None for r in a.samples)
    assert ledger.query("SELECT count(*) FROM samples").rows == [(4,)]


def test_vital_signs_a_host_cannot_mean_are_dropped_with_a_reason_noted_once():
    tender, ledger = tender_for(ScriptedLink([said("")]))
    a = attempt()
    hostile = {
        "util": 90,
        "mem_used_mb": 30000,  # more than the card has
        "mem_total_mb": 24576,
        "temp": float("nan"),
        "power_w": -5,
        "power_limit_w": 450,
        "fan_pct": 250,
        "ecc_uncorrected": "0",
        "retired_pages": None,  # not reported: absent, no reason
    }
    for _ in range(3):
        tender.take_samples(a, {"samples": [hostile]})
    row = a.samples[-1]
    assert (row["mem_total_mb"], row["power_limit_w"]) == (24576, 450)
    for kept_out in ("mem_used_mb", "temp", "power_w", "fan_pct", "ecc_uncorrected"):
        assert row[kept_out] is None, kept_out
    notes = ledger.query(
        "SELECT reason, detail->>'fields' FROM events WHERE detail->>'class' = 'vitals_dropped'"
    ).rows
    assert len(notes) == 1  # the same drops again are no news
    reason = notes[0][0]
    assert "mem_used_mb: 30000 is over the card's 24576" in reason
    assert "fan_pct: 250 is outside 0..100" in reason and "temp: not a finite number" in reason
    assert "retired_pages" not in reason
    # a sane sample is believed whole
    good = {**hostile, "mem_used_mb": 18000, "temp": 71, "power_w": 300, "fan_pct": 55}
    tender.take_samples(a, {"samples": [{**good, "ecc_uncorrected": 0}]})
    row = a.samples[-1]
    assert [row[k] for k in ("mem_used_mb", "temp", "power_w", "fan_pct", "ecc_uncorrected")] == [
        18000,
        71,
        300,
        55,
        0,
    ]
    ledger.close()


def run_preflight(link: ScriptedLink) -> tuple[Any, Any]:
    tender, ledger = tender_for(link)
    a = attempt()
    asyncio.run(asyncio.wait_for(tender._preflight(a), 5))
    return a, ledger


OK_DOC = {
    "probe": "preflight",
    "schema": 1,
    "ok": True,
    "device": {"name": "NVIDIA GeForce RTX 4090"},
    "matmul": {"result_ok": True, "tflops": 150.0},
}


@pytest.mark.parametrize(
    "line",
    [
        dumps({**OK_DOC, "matmul": {"result_ok": True, "tflops": HUGE}}),
        dumps({**OK_DOC, "matmul": {"result_ok": False, "max_rel_err": BIG}}),
        dumps({**OK_DOC, "pcie": {"width": BIG, "h2d_gbps": float("nan")}}),
        dumps({**OK_DOC, "ok": False, "error": {"type": HUGE, "message": [[[]]]}}),
        "[" * 60_000,
    ],
)
def test_a_hostile_preflight_document_ends_in_a_verdict(line):
    a, ledger = run_preflight(ScriptedLink([said(line + "\n")]))
    assert a.verdict is not None
    if not a.verdict.ok:
        (ev,) = [e for e in ledger.events() if e.kind == "preflight_failed"]
        assert ev.detail["class"] == a.verdict.failure_class


def test_a_preflight_that_raises_what_nobody_expected_ends_in_bad_probe():
    class Raises(ScriptedLink):
        async def probe(self, a, script, timeout_wall, command="python3 -"):
            raise KeyError("a bug of ours")

    a, ledger = run_preflight(Raises([said("")]))
    assert a.verdict is not None and a.verdict.failure_class == "bad_probe"
    assert "KeyError" in a.verdict.reason
    (ev,) = [e for e in ledger.events() if e.kind == "preflight_failed"]
    assert ev.detail["class"] == "bad_probe" and not ev.ok


def test_a_controller_side_os_error_is_tried_again_not_judged():
    """Out of descriptors on the controller says nothing about the host (issue 30, item 1)."""

    class NoFiles(ScriptedLink):
        async def probe(self, a, script, timeout_wall, command="python3 -"):
            self.calls.append("preflight")
            if len(self.calls) < 3:
                raise OSError(24, "Too many open files")
            return proven(said(json.dumps(OK_DOC) + "\n"), command)

    link = NoFiles([said("")])
    a, _ = run_preflight(link)
    assert link.calls == ["preflight"] * 3 and a.verdict is not None and a.verdict.ok


def test_tending_outlives_a_look_that_raises_and_notes_it_once():
    class Market:
        time_scale = 600.0

    class Link(ScriptedLink):
        market = Market()

        async def run(self, a, command, **kw):
            self.calls.append(command)
            if command.startswith("python3 -"):
                raise RuntimeError("unexpected")
            return said("")

    link = Link([said("")])
    tender, ledger = tender_for(link)
    clock = tender.clock
    a = attempt()
    a.life = dataclasses.replace(a.life, phase=Phase.VERIFIED)

    async def go() -> None:
        task = asyncio.create_task(tender.tend(a))
        for _ in range(5):
            await asyncio.sleep(0.01)
            clock.t += 1000  # a beat is due at each look
        assert not task.done()
        a.life = dataclasses.replace(a.life, phase=Phase.STOPPED)
        await asyncio.wait_for(task, 2)

    asyncio.run(go())
    samplings = [c for c in link.calls if c.startswith("python3 -")]
    assert len(samplings) >= 3
    notes = [e for e in ledger.events() if e.kind == "note" and e.detail.get("class")]
    assert len(notes) == 1 and "RuntimeError" in notes[0].reason


def _view(**kw: Any) -> AttemptView:
    base: dict[str, Any] = dict(
        instance_id=1,
        machine_id=10,
        offer_gpu="RTX 4090",
        phase=Phase.VERIFYING,
        status="running",
        status_msg="",
        status_since=0.0,
        created_at=0.0,
        running_at=0.0,
        preflight_started=True,
    )
    base.update(kw)
    return AttemptView(**base)


@pytest.mark.parametrize(
    "ssh_error, failures", [(None, 0), ("no SSH port published yet", 0), ("x", 0)]
)
def test_a_preflight_without_a_verdict_has_a_deadline_whatever_its_ssh_state(ssh_error, failures):
    snap = lambda a: FleetSnapshot(1, 10, 1, 10.0, 0.0, (a,))  # noqa: E731
    late = DEFAULT.preflight_deadline_s + 1
    a = _view(ssh_error=ssh_error, ssh_failures=failures)
    assert not [d for d in decide(snap(a), DEFAULT, late - 60) if isinstance(d, Abandon)]
    (ab,) = [d for d in decide(snap(a), DEFAULT, late) if isinstance(d, Abandon)]
    assert ab.rule == "rule:preflight_deadline" and ab.failure_class == "timeout"


def test_a_watchdog_found_gone_at_the_heartbeat_is_armed_again_with_a_note():
    """Issue 30, item 7: a job that killed the watchdog (an OOM kill does) went unnoticed and
    the rental billed on past the promised window after a kill -9 of the controller."""

    class Market:
        time_scale = 600.0

    class Link(ScriptedLink):
        market = Market()
        watchdog = "gone"

        async def run(self, a, command, **kw):
            self.calls.append(command)
            if "echo WATCHDOG" in command:
                return said(f"WATCHDOG {self.watchdog}\n")
            if "watchdog.py" in command:
                self.watchdog = "alive"  # armed again
            return said("")

    link = Link([said("")])
    tender, ledger = tender_for(link)
    a = attempt()
    a.watchdog_armed = True
    asyncio.run(tender._beat(a))
    arms = [c for c in link.calls if "cat > ~/.rentwatch/watchdog.py" in c]
    assert len(arms) == 1 and a.watchdog_armed
    (note,) = [e for e in ledger.events() if e.detail.get("class") == "watchdog_rearmed"]
    assert note.ok and "not running" in note.reason
    asyncio.run(tender._beat(a))  # alive now: no second arm, no second note
    assert len([c for c in link.calls if "cat > ~/.rentwatch/watchdog.py" in c]) == 1
    assert len([e for e in ledger.events() if e.detail.get("class") == "watchdog_rearmed"]) == 1


def test_the_heartbeat_goes_on_while_a_jobs_look_takes_long():
    """Found under load: a job's end pulls its artifacts in the same look, and the heartbeat
    waited behind it; a pull longer than the watchdog's window (a big artifact on a real host,
    a few slow SSH connects at a fast time scale) let the watchdog stop the host mid-pull, and
    the pull was refused. The look is held here as long as the test likes, while market time
    passes: the heartbeat goes on beside it."""

    class Market:
        time_scale = 600.0

    class Link(ScriptedLink):
        market = Market()

        async def run(self, a, command, **kw):
            self.calls.append(command)
            return said("WATCHDOG alive\n" if "heartbeat" in command else "")

    link = Link([said("")])
    tender, ledger = tender_for(link)
    clock, work = tender.clock, tender.jobs
    a = attempt()
    a.life = dataclasses.replace(a.life, phase=Phase.VERIFIED)
    a.watchdog_armed = True
    job = work.queue.take(a.instance_id, clock.now())
    assert job is not None
    pulled = asyncio.Event()
    looks: list[float] = []

    async def long_look(a, job) -> None:  # the artifacts coming off the box, slowly
        looks.append(clock.now())
        await pulled.wait()

    work.check = long_look  # type: ignore[method-assign]

    def beats() -> int:
        return len([c for c in link.calls if c.startswith("touch ~/.rentwatch/heartbeat")])

    async def go() -> None:
        task = asyncio.create_task(tender.tend(a))
        for _ in range(500):  # a ceiling on a hang only
            if looks:
                break
            await asyncio.sleep(0.001)
        assert looks and beats() == 0
        for n in range(1, 6):  # five beat intervals of market time pass during the one look
            clock.t += tender.beat_s
            for _ in range(500):
                if beats() >= n:
                    break
                await asyncio.sleep(0.001)
        got = beats()
        pulled.set()
        a.life = dataclasses.replace(a.life, phase=Phase.STOPPED)
        await asyncio.wait_for(task, 2)
        assert len(looks) == 1 and got == 5, (looks, link.calls)

    asyncio.run(go())
