"""An outsider's attack on a job's end (exit, pull, outbid, timeout, restart, rescue): each
await in the job code is a window in which `reap` may queue the job again (its host left
service) and another host take it. Found by a reviewer who had not seen the code; each test
failed before its fix. Fakes stand in for SSH and the market; the job code is the real one."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import pytest
from rentwatch.core.bidding.tier import RESCUE_WAIT_S
from rentwatch.core.campaign import Job
from rentwatch.core.jobs import JobQueue
from rentwatch.core.lifecycle import Lifecycle, Phase
from rentwatch.core.policy import DEFAULT
from rentwatch.engine.jobs.work import PULL_TRIES, JobWork

from tests.fake_market import FakeMarket, offer
from tests.test_bid_engine import JOB, key, proven  # noqa: F401
from tests.test_empty_answers import attempt
from tests.test_job_restore import PullLink, _work
from tests.test_rescue_unit import FakeJournal
from tests.test_supervisor_unit import kinds, run

from .ledgers import new_ledger

SRC, DST, Z = 11, 22, 33


def _host(iid: int, phase: Phase = Phase.VERIFIED) -> SimpleNamespace:
    return SimpleNamespace(
        instance_id=iid,
        job_said=lambda s: None,
        verdict=None,
        slowdown=0.0,
        gpu_name="RTX 4090",
        bid=None,
        life=Lifecycle(phase=phase),
        market_stopped=False,
        stop_rule="",
        paused=False,
        ssh_host="h",
        ssh_port=1,
        offer=None,
        status=phase.value,
    )


def test_a_contract_end_under_an_exited_job_sends_it_back_to_the_queue(key):  # noqa: F811
    # a bid rental the market stops at its contract's end is no outbid: nothing resumes it,
    # so the job whose output was on it must not wait for a resume (it waited for ever, and
    # the rules kept renting for a job that could never be dispatched)
    out = dataclasses.replace(JOB, artifacts=("out/",))
    market = FakeMarket([offer(i, 10 * i, 0.40, bid_floor=0.10) for i in range(1, 9)])

    async def body(sup, market, ledger):
        iid = await proven(sup, market)
        a = sup.attempts[iid]
        job = sup.jobs.jobs[0]
        if sup.jobs.on(iid) is None:
            sup.jobs.take(iid, market.t)
        job.status, job.exit_code = "finishing", 0  # exited, its pull not through yet
        market.t += 60
        market.set(iid, actual="stopped", intended="stopped", msg=None, end_date=market.t - 1)
        for _ in range(4):
            market.t += 1800
            await sup.poll_once()
        assert a.life.phase == Phase.STOPPED and not a.paused
        assert not kinds(ledger, "outbid")
        assert job.status != "finishing" or job.instance_id != iid

    run(key, body, market=market, policy=DEFAULT, rental="interruptible", jobs=(out,))


class TimeoutLink:
    def __init__(self) -> None:
        self.on_stop = None

    async def run(self, a, command, stdin=None, timeout=60):
        if self.on_stop is not None and "kill -TERM" in command:
            self.on_stop()  # the host leaves service while the stop is in flight
            self.on_stop = None
            await asyncio.sleep(0)
            return SimpleNamespace(stdout=b"", exit_status=0)
        return SimpleNamespace(stdout=b"RUNNING\nstep 9\n", exit_status=0)

    async def on_connection(self, a, fn):
        raise OSError("sftp: host gone")


def test_a_timeout_stop_that_outlives_its_host_leaves_the_job_queued(tmp_path):
    # it was set "finishing" on no host after the requeue: nothing looked at it again
    host = _host(SRC)
    fleet = SimpleNamespace(get={SRC: host}.get)
    journal, link = FakeJournal(), TimeoutLink()
    journal.campaign = "c"  # type: ignore[attr-defined]
    clock = SimpleNamespace(now=lambda: 10_000.0)
    queue = JobQueue((Job("fit", "train", artifacts=("out/",), retries=2, timeout_s=60),))
    work = JobWork(queue, fleet, link, journal, clock, artifacts_root=tmp_path)  # type: ignore[arg-type]
    job = queue.take(SRC, 100.0)
    assert job is not None

    def host_leaves() -> None:
        host.life = dataclasses.replace(host.life, phase=Phase.STOPPED)
        work.reap(clock.now())

    link.on_stop = host_leaves
    asyncio.run(work.check(host, job))  # type: ignore[arg-type]
    work.reap(clock.now())
    assert job.status == "pending" and job.instance_id is None
    assert not [f for f in journal.facts if f["detail"].get("timeout")]


def test_a_job_settled_without_its_artifacts_stays_settled_after_a_restart(tmp_path):
    # its pulls all failed, so it settled without them; a restart read that as "exited, not
    # pulled yet", and once its host was gone the finished job ran again from the start
    ledger = new_ledger()
    work = _work(ledger, PullLink(sftp_up=False), tmp_path)
    job = work.queue.take(7, 1_000.0)
    assert job is not None
    work.journal.fact(
        "job_started", attempt(7), actor="engine", ok=True, reason="started",
        detail={"job": "train", "attempt": 1},
    )  # fmt: skip
    for _ in range(PULL_TRIES):
        asyncio.run(work.check(attempt(7), job))
    assert job.status == "done"
    again = _work(ledger, PullLink(sftp_up=True), tmp_path)
    again.restore(ledger)
    again.reap(2_000.0)  # its host is not held any more
    restored = again.queue.by_name("train")
    assert restored is not None and restored.status == "done"


@pytest.mark.parametrize(
    "kind,detail",
    [
        ("job_finished", {"job": "train", "exit_code": None}),
        ("job_finished", {"job": "train", "exit_code": "oops"}),
        ("job_started", {"job": "train", "attempt": None}),
        ("job_started", {"job": "train", "attempt": [1]}),
    ],
)
def test_a_restart_reads_a_malformed_job_row_as_missing_fields(tmp_path, kind, detail):
    ledger = new_ledger()
    work = _work(ledger, PullLink(sftp_up=True), tmp_path)
    work.journal.fact(kind, attempt(7), actor="engine", ok=False, reason="x", detail=detail)
    again = _work(ledger, PullLink(sftp_up=True), tmp_path)
    again.restore(ledger)  # raised TypeError / ValueError out of the restart
    restored = again.queue.by_name("train")
    assert restored is not None
    # an exit whose code is unreadable is an exit all the same: its output is pulled
    assert restored.status in ("running", "finishing") and isinstance(restored.attempts, int)


class RescueLink:
    def __init__(self) -> None:
        self.launches: list[int] = []

    async def run(self, a, command, stdin=None, timeout=60):
        if "printf" in command:
            return SimpleNamespace(stdout=b"/root", exit_status=0)
        if command.startswith("ls "):
            return SimpleNamespace(stdout=b"", exit_status=0)
        if "nohup" in command or "setsid" in command:
            self.launches.append(a.instance_id)
        return SimpleNamespace(stdout=b"RUNNING\n", exit_status=0)


def test_a_requeue_while_the_copy_is_asked_for_leaves_no_copy_waited_for(tmp_path):
    # the copy was recorded as under way into the host the job had left; the next host ran
    # the job, then "gave up" the stale copy at its deadline and launched the job again
    job_spec = Job("fit", "train", checkpoint="ckpt", ref_gpu="RTX 4090", ref_hours=1.0, retries=3)
    hosts = {SRC: _host(SRC, Phase.STOPPED), DST: _host(DST), Z: _host(Z)}
    t = [1000.0]
    clock = SimpleNamespace(now=lambda: t[0])
    journal, link = FakeJournal(), RescueLink()
    journal.campaign = "c"  # type: ignore[attr-defined]
    queue = JobQueue((job_spec,))
    cancels: list[int] = []

    class Market:
        async def copy_between(self, *args):
            hosts[DST].life = dataclasses.replace(
                hosts[DST].life, phase=Phase.STOPPED
            )  # DST leaves service meanwhile
            work.reap(t[0])

        async def cancel_copies_to(self, dst):
            cancels.append(dst)

    work = JobWork(
        queue, SimpleNamespace(get=hosts.get), link, journal, clock,  # type: ignore[arg-type]
        artifacts_root=tmp_path, market=Market(),  # type: ignore[arg-type]
    )  # fmt: skip
    job = queue.take(DST, t[0])
    assert job is not None
    work.rescues.outbid(job, SRC, 900.0)  # its newer state waits on paused SRC
    asyncio.run(work._start(hosts[DST], job, t[0]))  # type: ignore[arg-type]
    assert job.status == "pending" and not work.rescues.waiting(job)
    asyncio.run(work.rescues.sweep())
    assert cancels == [DST]  # the copy into the host it left is cancelled
    assert queue.take(Z, t[0]) is job
    asyncio.run(work._start(hosts[Z], job, t[0]))  # type: ignore[arg-type]
    t[0] += RESCUE_WAIT_S + 1
    asyncio.run(work.check(hosts[Z], job))  # type: ignore[arg-type]
    started = [f for f in journal.facts if f["kind"] == "job_started"]
    assert len(started) == 1 and link.launches.count(Z) <= 1
