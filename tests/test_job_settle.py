"""An exited job is done only once its artifacts are off the box (found in CI: a host went
offline between a job's exit and its pull, and the campaign ended "3 done" with one job's
output never pulled). A pull that fails is tried again at the next looks; a host that leaves
service first takes the job back to the queue, since its output went with the host."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from rentwatch.core.campaign import Job
from rentwatch.core.jobs import JobQueue
from rentwatch.core.lifecycle import Phase
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
        throttle=None,
        gpu_name="RTX 4090",
        bid=None,
        life=SimpleNamespace(phase=Phase.VERIFIED),
        market_stopped=False,
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
    assert work.queue.holds(A) and work.queue.finishing_on(A) is job  # no next job there
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
    host.life.phase = Phase.STOPPED  # it went offline: its output went with it
    work.reap(1100.0)
    assert job.status == "pending" and job.instance_id is None and not work.queue.holds(A)
    again = [
        f for f in journal.facts if f["kind"] == "job_finished" and f["detail"].get("requeued")
    ]
    assert again, journal.facts
