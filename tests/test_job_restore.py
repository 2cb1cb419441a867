"""A controller restarted between a job's exit and its artifacts' pull finds the job
finishing on its host, not done: the campaign is not over until its output is off the box
(the output is still on that disk). A job whose output came off, or that declares none, stays
done. The exit and the failed pull are written by the real job code; only SSH is scripted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rentwatch.core.campaign import Job
from rentwatch.core.jobs import JobQueue
from rentwatch.engine.fleet import Fleet
from rentwatch.engine.jobs.work import JobWork
from rentwatch.engine.journal import Journal
from rentwatch.ledger import Ledger

from tests.test_empty_answers import Clock, ScriptedLink, attempt, said

from .ledgers import new_ledger

JOBS = (
    Job("train", "python train.py", artifacts=("out/",)),
    Job("eval", "python eval.py"),  # no artifacts: done at its exit
)


class PullLink(ScriptedLink):
    def __init__(self, sftp_up: bool) -> None:
        super().__init__([said("EXIT 0\nall done\n")])
        self.sftp_up = sftp_up

    async def on_connection(self, a: Any, fn: Any) -> list[dict]:
        if not self.sftp_up:
            raise OSError("sftp: connection reset")
        return [{"path": "out/r.txt", "bytes": 3, "sha256": "ab"}]


def _work(ledger: Ledger, link: ScriptedLink, root: Path) -> JobWork:
    clock = Clock()
    journal = Journal(ledger, "c", clock, log=lambda _: None)
    queue = JobQueue(JOBS)
    return JobWork(queue, Fleet(1), link, journal, clock, artifacts_root=root)  # type: ignore[arg-type]


def _exit_both(ledger: Ledger, root: Path, sftp_up: bool) -> None:
    work = _work(ledger, PullLink(sftp_up), root)
    for iid, name in ((7, "train"), (8, "eval")):
        job = work.queue.take(iid, 1_000.0)
        assert job is not None and job.name == name
        work.journal.fact(  # as _launch records a start
            "job_started", attempt(iid), actor="engine", ok=True, reason="started",
            detail={"job": name, "attempt": 1},
        )  # fmt: skip
        asyncio.run(work.check(attempt(iid), job))


def test_a_restart_between_the_exit_and_the_pull_finds_the_job_finishing(tmp_path):
    ledger = new_ledger()
    _exit_both(ledger, tmp_path, sftp_up=False)
    work = _work(ledger, PullLink(sftp_up=True), tmp_path)
    work.restore(ledger)
    train, evaluation = work.queue.by_name("train"), work.queue.by_name("eval")
    assert train is not None and evaluation is not None
    assert train.status == "finishing" and work.queue.on(7, "finishing") is train
    assert evaluation.status == "done"
    asyncio.run(work.check(attempt(7), train))  # the tender's next look pulls it
    assert train.status == "done" and train.exit_code == 0


def test_a_restart_after_the_pull_finds_the_job_done(tmp_path):
    ledger = new_ledger()
    _exit_both(ledger, tmp_path, sftp_up=True)
    work = _work(ledger, PullLink(sftp_up=True), tmp_path)
    work.restore(ledger)
    assert [j.status for j in work.queue.jobs] == ["done", "done"]
    assert work.queue.on(7, "finishing") is None


def test_failed_pulls_in_rows_that_do_not_say_their_kind_count_toward_the_tries(tmp_path):
    # a ledger written before pulls said their kind: after the exit, a pull is of the output
    from rentwatch.engine.jobs.pull import PULL_TRIES

    ledger = new_ledger()
    _exit_both(ledger, tmp_path, sftp_up=False)  # one failed pull, with its kind
    for k in range(PULL_TRIES - 1):
        ledger.record(
            "artifacts", at=2_000.0 + k, actor="engine", ok=False, reason="pull failed",
            instance_id=7, campaign="c", detail={"job": "train"},
        )  # fmt: skip
    work = _work(ledger, PullLink(sftp_up=True), tmp_path)
    work.restore(ledger)
    train = work.queue.by_name("train")
    assert train is not None and train.status == "done"  # its tries were spent: settled
