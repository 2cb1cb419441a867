"""`rentwatch jobs` and `rentwatch logs` against a running controller (live: through its API),
then against the ledger it left (its jobs folded from their starts and ends, each job's output
kept at its end, or off its host by the route the engine reached it by)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from rentwatch.views.jobs import Span, fold, span_usd

from .campaigns import campaign_text, headless_cmd, headless_env
from .cli_run import run_cli
from .conftest import market_stands

KEYS = {"campaign", "job", "state", "instance_id", "progress", "eta_min", "usd", "attempts"}
# each job prints, writes a hostile line, then runs until the test opens its gate
JOB = """
[[jobs]]
name = "{name}"
run = "echo hello-from-{name}; printf 'x\\\\033]0;owned\\\\007y\\\\033[2Jz\\\\n'; until [ -e {gate} ]; do sleep 0.2; done; echo bye-{name}"
"""


def _jobs(ledger: Path) -> list[dict]:
    got = run_cli("jobs", "--ledger", str(ledger), "--json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def _jobs_yet(ledger: Path) -> list[dict]:
    """The jobs, or none while the controller has not written its ledger yet."""
    got = run_cli("jobs", "--ledger", str(ledger), "--json")
    return json.loads(got.stdout) if got.returncode == 0 else []


def _until(cond, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"never: {what}")


def _start(sim, tmp_path: Path, ledger: Path, gate: Path, *more: str) -> subprocess.Popen:
    camp = tmp_path / "c.toml"
    jobs = "".join(JOB.format(name=n, gate=gate) for n in ("a", "b"))
    camp.write_text(campaign_text("jq", 1, jobs))
    return subprocess.Popen(
        headless_cmd(sim, tmp_path, camp, ledger, *more),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=headless_env(sim),
    )


def test_jobs_and_logs_through_the_controller_then_from_the_ledger(make_sim, tmp_path, runtime):
    sim = make_sim(seed=7, offers=60, time_scale=240)
    ledger, gate = tmp_path / "l.duckdb", tmp_path / "gate"
    proc = _start(sim, tmp_path, ledger, gate)
    try:
        ls = lambda: json.loads(run_cli("ls", "--json").stdout or "[]")  # noqa: E731
        _until(ls, 60, "the controller serves")

        def running() -> list[dict]:
            rows = _jobs_yet(ledger)
            return rows if any(r["state"] == "running" for r in rows) else []

        live = _until(running, 120, "a job running")
        assert [r["job"] for r in live] == ["a", "b"] and all(set(r) >= KEYS for r in live)
        a = next(r for r in live if r["state"] == "running")
        assert a["instance_id"] and a["host"] and a["attempts"] == 1 and a["usd"] >= 0
        other = next(r for r in live if r is not a)
        assert other["state"] == "pending" and other["instance_id"] is None  # fleet of one

        def said() -> str:
            got = run_cli("logs", a["job"], "--ledger", str(ledger))
            assert got.returncode == 0, got.stderr
            return got.stdout if f"hello-from-{a['job']}" in got.stdout else ""

        out = _until(said, 60, "the job's output through the controller")
        # the host's escapes never reach the terminal: the title change and the clear are gone
        assert "xyz" in out and "\x1b" not in out and "owned" not in out
        # a job the campaign does not have: a clear error
        nope = run_cli("logs", "nope", "--ledger", str(ledger))
        assert nope.returncode == 2 and "no job 'nope'" in nope.stderr
        gate.touch()
        assert proc.wait(180) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    # the controller is gone: the same jobs, from the ledger alone
    done = _jobs(ledger)
    assert [(r["job"], r["state"], r["progress"]) for r in done] == [
        ("a", "done", 1.0),
        ("b", "done", 1.0),
    ]
    assert all(r["usd"] > 0 and r["instance_id"] for r in done)
    kept = run_cli("logs", "b", "--ledger", str(ledger))
    assert kept.returncode == 0 and "kept at" in kept.stderr, kept.stderr
    assert "hello-from-b" in kept.stdout and "bye-b" in kept.stdout and "\x1b" not in kept.stdout
    table = run_cli("jobs", "--ledger", str(ledger), "--campaign", "jq")
    assert table.returncode == 0 and "campaign jq" in table.stdout and "done" in table.stdout


def test_a_running_jobs_output_off_its_host_when_no_controller_runs(make_sim, tmp_path, runtime):
    """The controller died (SIGKILL): its job still runs on the host, reached by the route
    the engine recorded, with rentwatch's key, as `rentwatch ssh` does. The job runs on only
    until the host's watchdog misses the dead controller's heartbeat (15 market minutes), so
    the market's clock stands from the kill until the log is read: a CLI process that takes
    long to start on a loaded box costs the market nothing (before, the watchdog stopped the
    host first when the box was busy: "Connection refused"). Until the kill, the controller
    beats for its host, as in the test above at the same pace."""
    sim = make_sim(seed=7, offers=60, time_scale=240)
    ledger, gate = tmp_path / "l.duckdb", tmp_path / "gate"
    proc = _start(sim, tmp_path, ledger, gate)
    try:
        _until(
            lambda: any(r["state"] == "running" for r in _jobs_yet(ledger)), 120, "a job running"
        )
        _until(
            lambda: "hello-from" in run_cli("logs", "a", "--ledger", str(ledger)).stdout,
            60,
            "output",
        )
        with market_stands(sim):
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            got = run_cli("logs", "a", "--ledger", str(ledger), "--ssh-key", str(tmp_path / "key"))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    rows = _jobs(ledger)  # from the ledger: the job's last start stands
    a = next(r for r in rows if r["job"] == "a")
    assert a["state"] == "running" and a["progress"] is None
    assert got.returncode == 0, got.stderr
    assert f"on i:{a['instance_id']} by its" in got.stderr
    assert "hello-from-a" in got.stdout and "xyz" in got.stdout and "\x1b" not in got.stdout
    gate.touch()


def _ev(seq, kind, job="j", iid=1, **detail):
    return {
        "seq": seq,
        "ts": float(seq * 100),
        "kind": kind,
        "job": job,
        "instance_id": iid,
        "ok": detail.pop("ok", None),
        "requeued": detail.get("requeued"),
        "exit_code": detail.get("exit_code"),
        "attempt": detail.get("attempt"),
        "log_tail": detail.get("log_tail"),
    }


def test_a_jobs_state_is_its_last_start_or_end():
    started = _ev(1, "job_started", attempt=1)
    lost = _ev(2, "job_finished", ok=False, requeued="true")
    again = _ev(3, "job_started", iid=2, attempt=2)
    ok = _ev(4, "job_finished", iid=2, ok=True, exit_code="0", log_tail="a\nlast line\n")
    voided = _ev(5, "job_finished", iid=2, ok=False, requeued="true")
    out_of_retries = _ev(5, "job_finished", iid=2, ok=False, requeued="false")
    cases = [
        ([], "pending", 0),
        ([started], "running", 1),
        ([started, lost], "pending", 1),
        ([started, lost, again], "running", 2),
        ([started, lost, again, ok], "done", 2),
        # an exit 0 whose output went with its host before it came off: run again
        ([started, lost, again, ok, voided], "pending", 2),
        ([started, lost, again, out_of_retries], "failed", 2),
    ]
    for events, state, attempts in cases:
        j = fold(events, ["j"])["j"]
        assert (j.state, j.attempts) == (state, attempts), events
    j = fold([started, lost, again, ok], ["j", "never"])
    assert j["never"].state == "pending" and j["j"].last_line == "last line"
    assert j["j"].spans == [Span(1, 100.0, 200.0), Span(2, 300.0, 400.0)]


def test_a_jobs_dollars_are_its_hosts_billing_while_it_ran_there():
    billed = {
        # 0-150 s running ($3.6/h GPU + $0.36/h storage), then stopped (storage only)
        1: [
            {"ts": 0, "span_s": 150, "gpu_on": True, "storage_on": True, "gpu_dph": 3.6,
             "storage_dph": 0.36},
            {"ts": 150, "span_s": 1000, "gpu_on": False, "storage_on": True, "gpu_dph": 3.6,
             "storage_dph": 0.36},
        ],
    }  # fmt: skip
    # 100-150 s at $3.96/h, then 150-200 s at $0.36/h
    assert (
        abs(span_usd([Span(1, 100.0, 200.0)], billed, 999.0) - (50 * 3.96 + 50 * 0.36) / 3600)
        < 1e-9
    )
    # a span still open bills to `now`; a host the ledger has no spans for bills nothing
    assert abs(span_usd([Span(1, 1000.0, None)], billed, 1100.0) - 100 * 0.36 / 3600) < 1e-9
    assert span_usd([Span(9, 0.0, 10.0)], billed, 50.0) == 0.0
