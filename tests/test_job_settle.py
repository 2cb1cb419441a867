"""An exited job is done only once its artifacts are off the box (found in CI: a host went
offline between a job's exit and its pull, and the campaign ended "3 done" with one job's
output never pulled). A pull that fails is tried again at the next looks; a host that leaves
service first takes the job back to the queue, since its output went with the host."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

from rentwatch.core.campaign import Job
from rentwatch.core.jobs import JobQueue
from rentwatch.core.lifecycle import Lifecycle, Phase
from rentwatch.engine.attempt import Attempt
from rentwatch.engine.jobs.work import PULL_TRIES, JobWork

from .test_rescue_unit import FakeJournal

A = 11


class Link:
    """A host whose job has exited 0; its SFTP fails while `sftp_down`."""

    def __init__(self) -> None:
        self.sftp_down = True
        self.pulls = 0

    async def run(self, a, command, stdin=None, timeout=60):
        return SimpleNamespace(stdout=b"EXIT 0\nall done\n", exit_status=0)

    async def on_connection(self, a, fn):
        self.pulls += 1
        if self.sftp_down:
            raise OSError("sftp: connection reset")
        return [{"path": "out/r.txt", "bytes": 3, "sha256": "ab"}]


def _host():
    return SimpleNamespace(
        instance_id=A,
        job_said=lambda s: None,
        verdict=None,
        slowdown=0.0,
        gpu_name="RTX 4090",
        bid=None,
        life=Lifecycle(phase=Phase.VERIFIED),
        market_stopped=False,
        stop_rule="",
        paused=False,
    )


def _world(tmp_path):
    host = _host()
    fleet = SimpleNamespace(get=lambda iid: host if iid == A else None)
    journal, link = FakeJournal(), Link()
    journal.campaign = "c"  # type: ignore[attr-defined]
    clock = SimpleNamespace(now=lambda: 1000.0)
    queue = JobQueue((Job("fit", "train", artifacts=("out/",), retries=1),))
    work = JobWork(queue, fleet, link, journal, clock, artifacts_root=tmp_path)  # type: ignore
    job = queue.take(A, 100.0)
    assert job is not None
    return work, job, host, link, journal


def test_a_failed_pull_is_tried_again_and_the_job_is_done_once_it_lands(tmp_path):
    work, job, host, link, journal = _world(tmp_path)
    asyncio.run(work.check(host, job))
    assert job.status == "finishing" and link.pulls == 1  # exited, its output not off yet
    assert work.queue.holds(A) and work.queue.on(A, "finishing") is job  # no next job there
    link.sftp_down = False
    asyncio.run(work.check(host, job))
    assert job.status == "done" and job.exit_code == 0 and link.pulls == 2
    finished = [f for f in journal.facts if f["kind"] == "job_finished"]
    assert len(finished) == 1  # the exit is recorded once, however many pulls it took
    assert [f["ok"] for f in journal.facts if f["kind"] == "artifacts"] == [False, True]


def test_pulls_that_keep_failing_on_a_live_host_settle_the_job_without_them(tmp_path):
    work, job, host, link, _ = _world(tmp_path)
    for _ in range(PULL_TRIES):
        asyncio.run(work.check(host, job))
    assert job.status == "done" and link.pulls == PULL_TRIES  # each failure is in the ledger


def test_a_host_that_leaves_service_before_the_pull_takes_the_job_back(tmp_path):
    work, job, host, link, journal = _world(tmp_path)
    asyncio.run(work.check(host, job))
    assert job.status == "finishing"
    host.life = dataclasses.replace(
        host.life, phase=Phase.STOPPED
    )  # it went offline: its output went with it
    work.reap(1100.0)
    assert job.status == "pending" and job.instance_id is None and not work.queue.holds(A)
    again = [
        f for f in journal.facts if f["kind"] == "job_finished" and f["detail"].get("requeued")
    ]
    assert again, journal.facts


def _bid_host() -> Attempt:
    a = Attempt(A, None, 70, 7, "RTX 4090", 0.0, 0.3, 0.01)
    for k, to in enumerate((Phase.BOOTING, Phase.RUNNING, Phase.VERIFIED)):
        a.life = a.life.moved(to, 10.0 * (k + 1), "up")
        assert a.life.phase == to
    a.bid, a.bid_floor = 0.2, 0.15
    return a


def test_an_outbid_after_the_exit_keeps_the_job_until_the_resume_brings_its_output(tmp_path):
    # found in CI: a bid rental was outbid between its job's exit and the pull; the job was
    # queued again and ran to the end twice, though its output waited on the paused disk
    work, job, _, link, journal = _world(tmp_path)
    host = _bid_host()
    work.fleet = SimpleNamespace(get=lambda iid: host if iid == A else None)
    asyncio.run(work.check(host, job))  # exited; the pull fails
    assert job.status == "finishing"
    host.outbid_at, host.bid_floor = 1050.0, 0.25
    host.life = host.life.moved(Phase.STOPPED, 1050.0, "outbid")
    assert host.life.phase == Phase.STOPPED
    assert host.paused
    work.reap(1100.0)
    assert job.status == "finishing" and job.instance_id == A  # waits for the resume
    host.life = host.life.moved(Phase.VERIFIED, 1400.0, "resumed by itself")
    assert host.life.phase == Phase.VERIFIED
    link.sftp_down = False
    asyncio.run(work.check(host, job))
    assert job.status == "done"
    assert [f["ok"] for f in journal.facts if f["kind"] == "job_finished"] == [True]


def test_a_paused_rental_we_stop_ourselves_gives_its_finishing_job_back_to_the_queue(tmp_path):
    work, job, _, link, journal = _world(tmp_path)
    host = _bid_host()
    work.fleet = SimpleNamespace(get=lambda iid: host if iid == A else None)
    asyncio.run(work.check(host, job))
    host.outbid_at, host.bid_floor = 1050.0, 0.25
    host.life = host.life.moved(Phase.STOPPED, 1050.0, "outbid")
    assert host.life.phase == Phase.STOPPED
    host.stopped_by_us, host.outbid_at = (
        True,
        None,
    )  # the tier moved on: it never resumes, its output is lost
    assert not host.paused
    work.reap(1700.0)
    assert job.status == "pending" and not work.queue.holds(A)


def test_a_pull_that_lands_after_its_host_left_leaves_the_requeued_job_alone(tmp_path):
    # found in CI: the host left service while the pull ran; the job was queued again and
    # taken by the next host, then the pull landed and marked it finished (exit -1: "failed"),
    # so the drained rule stopped the host it was running on
    work, job, host, link, journal = _world(tmp_path)
    link.sftp_down = False
    landed = asyncio.Event()
    pulled = link.on_connection

    async def slow_pull(a, fn):
        await landed.wait()
        return await pulled(a, fn)

    link.on_connection = slow_pull

    async def run() -> None:
        check = asyncio.create_task(work.check(host, job))
        await asyncio.sleep(0.05)
        assert job.status == "finishing"
        host.life = dataclasses.replace(host.life, phase=Phase.STOPPED)
        work.reap(1100.0)
        assert job.status == "pending"
        assert work.queue.take(12, 1200.0) is job  # the next host has it
        landed.set()
        await check

    asyncio.run(run())
    assert job.status == "running" and job.instance_id == 12
    assert work.queue.on(12) is job


def test_a_host_that_leaves_while_its_job_launches_records_no_start(tmp_path):
    # the launch is an await: the host left service meanwhile and the job was queued again;
    # its start was still written to the ledger, on a host it never ran on
    work, job, host, link, journal = _world(tmp_path)
    go = asyncio.Event()

    async def slow_run(a, command, stdin=None, timeout=60):
        await go.wait()
        return SimpleNamespace(stdout=b"", exit_status=0)

    link.run = slow_run

    async def run() -> None:
        launch = asyncio.create_task(work._launch(host, job, 1000.0))
        await asyncio.sleep(0.05)
        host.life = dataclasses.replace(host.life, phase=Phase.STOPPED)
        work.reap(1100.0)
        go.set()
        await launch

    asyncio.run(run())
    assert job.status == "pending" and job.instance_id is None
    assert not [f for f in journal.facts if f["kind"] == "job_started"]
