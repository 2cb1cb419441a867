"""Hold and batch: jobs run on proven rentals, the same instance takes the next job, artifacts
come off the box with checksums, a restart re-attaches, and a second campaign learns."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import subprocess
import time

import pytest
from rentwatch.core.campaign import Job
from rentwatch.core.jobs import EARLY_LOSS_S, FREE_LOSSES, JobQueue
from rentwatch.core.policy import get_policy
from rentwatch.engine.hosts.ssh import SSHRunner, load_or_create_key
from rentwatch.engine.jobs.runner import UnsafePath, parse_status, safe_relative
from rentwatch.engine.supervisor import Supervisor
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign
from rentwatch.market.vast.client import VastClient

from .campaigns import (
    HeadlessRun,
    campaign_text,
    headless_cmd,
    headless_env,
    restarted,
    run_campaign,
)


def jobs_text(n: int, sleep_s: float) -> str:
    """`n` jobs (job-0, job-1, ...) that each sleep `sleep_s` wall seconds, then write their
    number into their artifact."""
    return "".join(
        f"""
[[jobs]]
name = "job-{i}"
run = "mkdir -p out && python3 -c \\"import time; time.sleep({sleep_s}); open('out/r{i}.txt', 'w').write('{i}' * {100 + i})\\""
artifacts = ["out/r{i}.txt"]
"""
        for i in range(n)
    )


JOBS = jobs_text(12, 1.0)
# the jobs a kill -9 lands among (once two started): long enough to be killed mid-run, and
# four more for the restart to run (a wall-paced market's CPU goes with the wall seconds)
KILLED = 6
KILLED_JOBS = jobs_text(KILLED, 2.5)


def test_twelve_jobs_on_a_fleet_of_three(make_sim, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sim = make_sim(seed=7, offers=60, time_scale=120)
    code, ledger = run_campaign(sim, tmp_path, "default", name="batch", fleet=3, extra=JOBS)
    led = Ledger(ledger)
    r = led.receipt()[0]
    assert code == 0, r
    assert r["jobs_finished"] == 12
    assert r["creates"] < 12, "batching: fewer creates than jobs"
    for i in range(12):
        local = tmp_path / "artifacts" / "batch" / f"job-{i}" / "out" / f"r{i}.txt"
        assert local.read_text() == str(i) * (100 + i)
    arts = led.events(where="kind = 'artifacts' AND ok")
    assert len(arts) == 12
    for ev in arts:
        [rec] = ev.detail["files"]
        i = int(ev.detail["job"].split("-")[1])
        assert rec["sha256"] == hashlib.sha256((str(i) * (100 + i)).encode()).hexdigest()
    # each job finished exactly once
    names = [e.detail["job"] for e in led.events(where="kind = 'job_finished' AND ok")]
    assert sorted(names) == sorted(f"job-{i}" for i in range(12))


def _healthy_market(make_sim):
    # pulls of 1-3 minutes, not the default 6-16: a wall-paced campaign's CPU goes with its
    # market minutes, and none of these tests is about a boot
    healthy = {"behaviour": "healthy", "share": 1.0, "pull_min": [1.0, 3.0]}
    return make_sim(seed=7, offers=60, time_scale=120, host_class=[healthy])


def kill_9_mid_jobs_then_restart(sim, tmp_path, camp, ledger, between=lambda: None):
    """A headless run killed (SIGKILL) once two jobs have started, then the same command
    again to its end (`restarted`: the market stands until it has adopted); `between` runs
    while nothing watches (a key change, say)."""
    env = headless_env(sim)
    cmd = headless_cmd(sim, tmp_path, camp, ledger)
    first = HeadlessRun(cmd, env, tmp_path)
    deadline, started = time.time() + 90, 0
    while started < 2 and (line := first.readline(deadline - time.time())):
        started += " started on " in line
    first.proc.kill()
    first.finish(30)
    again = restarted(sim, cmd, env, tmp_path, between)
    said = again.finish(240)
    return subprocess.CompletedProcess(cmd, again.proc.returncode, said)


def test_kill_9_mid_jobs_reattaches(make_sim, tmp_path):
    sim = make_sim(seed=7, offers=60, time_scale=120)
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("reattach", 2) + KILLED_JOBS)
    ledger = tmp_path / "l.duckdb"
    proc = kill_9_mid_jobs_then_restart(sim, tmp_path, camp, ledger)
    assert proc.returncode == 0, proc.stdout[-3000:]
    led = Ledger(ledger)
    done = [e.detail["job"] for e in led.events(where="kind = 'job_finished' AND ok")]
    assert sorted(done) == sorted(f"job-{i}" for i in range(KILLED)), (
        "a job was lost or finished twice"
    )
    assert led.events(where="kind = 'adopted'")


def test_second_campaign_learns_from_the_first(make_sim, tmp_path):
    sim = make_sim(seed=11, offers=40, stepped=True)
    ledger = tmp_path / "shared.duckdb"
    code1, _ = run_campaign(sim, tmp_path, "default", name="first", fleet=3, ledger=ledger)
    code2, _ = run_campaign(sim, tmp_path, "default", name="second", fleet=3, ledger=ledger)
    led = Ledger(ledger)
    r = {x["campaign"]: x for x in led.receipt()}
    first, second = r["first"], r["second"]
    print(f"\nfirst: {first}\nsecond: {second}")
    assert code1 == code2 == 0
    assert second["dud_usd"] < first["dud_usd"]
    assert second["duds"] < first["duds"]
    assert second["creates"] < first["creates"]
    # the second campaign's receipt holds what it reused, the time it held it, and its own jobs;
    # between them the two receipts bill every cent the ledger knows of
    assert second["reused"] >= 1 and first["reused"] == 0
    assert second["verified"] >= 3 and second["gpu_hours"] > 0 and second["total_usd"] > 0
    assert first["jobs_finished"] == second["jobs_finished"] == 0
    total = sum(row["total_usd"] for row in led.instance_rows())
    assert abs(first["total_usd"] + second["total_usd"] - total) < 1e-9
    reused = led.events(
        where="kind = 'start' AND actor = 'rule:reuse' AND phase = 'outcome' AND ok AND campaign = 'second'"
    )
    verified = led.events(where="kind = 'preflight_passed' AND campaign = 'second'")
    assert reused and len(verified) >= 3  # the second fleet was proven again before it counted


def test_job_queue_rules():
    q = JobQueue((Job("a", "x", retries=1), Job("b", "y", retries=0)))
    a = q.take(1, 0.0)
    assert a.name == "a" and q.take(1, 0.0) is None  # one job per instance at a time
    b = q.take(2, 0.0)
    q.host_died(1)
    assert a.status == "pending"  # retried elsewhere
    q.host_died(2)
    assert b.status == "failed"  # out of retries
    a2 = q.take(3, 1.0)
    q.finished(a2, 3, 2.0)
    assert a2.status == "failed" and q.pending == 0  # failed on its own: not retried blindly


def test_a_host_that_dies_soon_after_taking_a_job_costs_it_no_retry():
    q = JobQueue((Job("a", "x", retries=0),))
    minute = 60.0
    for i in range(FREE_LOSSES):  # duds the preflight missed, each gone within minutes
        job = q.take(i, i * minute)
        q.host_died(i, i * minute + 2 * minute, host_fault=True)
        assert job.status == "pending" and job.host_losses == i + 1
    job = q.take(99, 100 * minute)  # one more early loss: the job may be what kills its hosts
    q.host_died(99, 101 * minute, host_fault=True)
    assert job.status == "failed"

    late = JobQueue((Job("b", "y", retries=0),))
    job = late.take(1, 0.0)
    late.host_died(1, EARLY_LOSS_S + 1, host_fault=True)  # it had run a while: a real retry
    assert job.status == "failed" and job.host_losses == 0

    gone = JobQueue((Job("c", "z", retries=0),))
    job = gone.take(1, 0.0)
    gone.host_died(1, 60.0)  # the job's process vanished on a live host: its own doing, perhaps
    assert job.status == "failed"


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "~/x", "a/../../b", "a\\b", ""])
def test_unsafe_artifact_paths_are_refused(path):
    with pytest.raises(UnsafePath):
        safe_relative(path)


def test_status_parsing():
    assert parse_status(b"EXIT 0\nlog").exit_code == 0
    assert parse_status(b"RUNNING\n").state == "running"
    assert parse_status(b"EXIT x\n").exit_code == -1
    assert parse_status(b"\x1b[2J garbage").state == "none"


# The job saves its step whole and renames it into place, as a checkpoint must be saved: a pull
# reads the file while the job runs, and one rewritten in place under it reads torn on a loaded
# box ("9", then the "0" of "10": a retry from step 90).
RESUMABLE = """
[[jobs]]
name = "long"
checkpoint = "ckpt"
checkpoint_every_min = 0.5
retries = 2
artifacts = ["out/result"]
run = '''python3 - <<'PY'
import os, time
os.makedirs("ckpt", exist_ok=True)
step = int(open("ckpt/step").read()) if os.path.exists("ckpt/step") else 0
start = step
while step < 12:
    time.sleep(0.4)
    step += 1
    open("step.new", "w").write(str(step))
    os.replace("step.new", "ckpt/step")
os.makedirs("out", exist_ok=True)
open("out/result", "w").write("start=%d end=%d" % (start, step))
print("done from", start)
PY'''
"""


def test_interrupted_job_resumes_from_its_checkpoint(make_sim, tmp_path, monkeypatch):
    """The host goes offline mid-job; the retry on another host starts from the last checkpoint."""
    import threading

    from rentwatch.sim.rental import Step

    monkeypatch.chdir(tmp_path)
    sim = _healthy_market(make_sim)
    knocked: list[int] = []

    pulled = tmp_path / "artifacts" / "ckpt" / "long" / "checkpoint"

    def a_checkpoint_pulled() -> bool:
        """The engine holds a checkpoint past step 0 (on a loaded box its pulls lag the job)."""
        for step in pulled.rglob("step"):
            with contextlib.suppress(OSError, ValueError):
                if int(step.read_text() or 0) > 0:
                    return True
        return False

    def saboteur() -> None:
        deadline = time.time() + 240  # a ceiling only
        while time.time() < deadline and not knocked:
            for step in sim.ssh.workdir.glob("i*/ckpt/step"):
                try:
                    value = int(step.read_text() or 0)
                except ValueError:
                    continue
                if value >= 6 and a_checkpoint_pulled():
                    iid = int(step.parent.parent.name[1:])

                    def offline(iid: int = iid) -> None:
                        seg = sim.market.instances[iid].segments[-1]
                        now = sim.market.clock.now()
                        seg.steps.append(Step(now, "offline", None))
                        seg.halted_at = now

                    sim.call(offline)
                    knocked.append(iid)
                    return
            time.sleep(0.05)

    t = threading.Thread(target=saboteur, daemon=True)
    t.start()
    code, ledger = run_campaign(sim, tmp_path, "default", name="ckpt", fleet=1, extra=RESUMABLE)
    t.join(1)
    assert knocked, "the job never reached step 6 with a checkpoint pulled"
    assert code == 0
    result = (tmp_path / "artifacts" / "ckpt" / "long" / "out" / "result").read_text()
    start = int(result.split()[0].split("=")[1])
    assert start > 0 and result.endswith("end=12"), result
    led = Ledger(ledger)
    assert led.events(where="kind = 'artifacts' AND reason LIKE 'checkpoint of long pushed%'")


def test_job_timeout_and_secret_opt_in(make_sim, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sim = _healthy_market(make_sim)
    extra = """
[[jobs]]
name = "stuck"
run = "mkdir -p out && echo partial > out/log.txt && sleep 60"
artifacts = ["out/"]
timeout_min = 1
env = { HF_TOKEN = "hf_not_really" }
allow_secret_env = ["HF_TOKEN"]
"""
    code, ledger = run_campaign(sim, tmp_path, "default", name="stuck", fleet=1, extra=extra)
    assert code == 3  # the campaign ended with a failed job
    led = Ledger(ledger)
    [fin] = led.events(where="kind = 'job_finished'")
    assert fin.ok is False and fin.detail["timeout"] is True
    # what it wrote before its timeout still came off the box
    assert (tmp_path / "artifacts" / "stuck" / "stuck" / "out" / "log.txt").read_text() == (
        "partial\n"
    )
    [warn] = led.events(where="kind = 'note' AND actor = 'human'")
    assert "HF_TOKEN" in warn.reason and "hf_not_really" not in warn.reason


def test_secret_env_needs_an_explicit_opt_in():
    from rentwatch.core.errors import ConfigError
    from rentwatch.market.factory import load_campaign

    base = (
        "name='a'\nimage='x'\nmax_dph=1\nbudget_usd=1\n[[jobs]]\nrun='x'\nenv={WANDB_API_KEY='k'}\n"
    )
    with pytest.raises(ConfigError, match="allow_secret_env"):
        load_campaign(base)
    job = load_campaign(base + "allow_secret_env=['WANDB_API_KEY']\n").jobs[0]
    assert job.secret_env == ("WANDB_API_KEY",)
    with pytest.raises(ConfigError, match="checkpoint"):
        load_campaign(base.replace("env={WANDB_API_KEY='k'}", "checkpoint='../up'"))


def test_symlinks_on_the_host_are_not_followed(make_sim, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sim = _healthy_market(make_sim)
    extra = """
[[jobs]]
name = "sneaky"
run = "mkdir -p out && echo fine > out/ok.txt && ln -s /etc/passwd out/evil && ln -s / out/root"
artifacts = ["out"]
"""
    code, ledger = run_campaign(sim, tmp_path, "default", name="sneaky", fleet=1, extra=extra)
    assert code == 0
    got = tmp_path / "artifacts" / "sneaky" / "sneaky" / "out"
    assert (got / "ok.txt").read_text() == "fine\n"
    assert not (got / "evil").exists() and not (got / "root").exists()
    [ev] = Ledger(ledger).events(where="kind = 'artifacts'")
    refused = {r["path"] for r in ev.detail["files"] if r.get("error") == "symlink refused"}
    assert refused == {"out/evil", "out/root"}


def test_local_destination_is_contained(tmp_path):
    from rentwatch.engine.jobs.pull import _local

    assert _local(tmp_path, "a/b.txt") == (tmp_path / "a" / "b.txt").resolve()
    with pytest.raises(UnsafePath):
        _local(tmp_path, "../outside.txt")
    (tmp_path / "link").symlink_to("/tmp")
    with pytest.raises(UnsafePath):
        _local(tmp_path, "link/x.txt")


def test_a_reused_rental_shown_as_observed_is_taken_over_proven(make_sim, tmp_path):
    """Under adopt_all (the dashboard's controller) another campaign's proven, stopped rental
    is first shown as observed; reusing it must carry its proof and host key, so automation
    may stop it but never destroy it."""
    sim = make_sim(seed=11, offers=40, time_scale=240)
    ledger_path = tmp_path / "shared.duckdb"
    code, _ = run_campaign(sim, tmp_path, "default", name="first", fleet=2, ledger=ledger_path)
    assert code == 0

    async def second() -> list:
        client = VastClient(sim.url, sim.api_key, min_intervals={})
        await client.sync_clock()
        campaign = load_campaign(campaign_text("second", 2))
        sup = Supervisor(
            client,
            Ledger(ledger_path),
            campaign,
            get_policy("default"),
            SSHRunner(load_or_create_key(tmp_path / "key")),
            log=lambda _: None,
            adopt_all=True,
        )
        await sup.prepare()
        reused = [e.instance_id for e in sup.ledger.events(where="actor = 'rule:reuse' AND ok")]
        out = [(sup.fleet[i], sup.ssh.pinned.get(i)) for i in reused]
        await client.aclose()
        return out

    led = Ledger(ledger_path)
    led.record(
        "campaign_start", at=time.time(), actor="engine", reason="restarted", campaign="first"
    )
    led.close()
    assert asyncio.run(second()) == []  # its own controller runs again: never taken from it
    led = Ledger(ledger_path)
    led.record("campaign_end", at=time.time(), actor="engine", reason="ended", campaign="first")
    led.close()
    taken = asyncio.run(second())
    assert taken, "nothing was reused"
    for a, pin in taken:
        assert a.owned and a.life.proven and pin, (a.instance_id, a.life.proven, pin)
