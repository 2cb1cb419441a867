"""A dropped SSH session is no answer, not a verdict: the job checks and the preflight look again
before they requeue a job or abandon a host (issue 18: requeues and false kills on markets with
a few percent of sessions dropped). Fakes stand in for the SSH link only; the job runner, the
queue, the ledger and the tender are the real ones."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rentwatch.core.campaign import Job
from rentwatch.core.jobs import JobQueue
from rentwatch.core.lifecycle import Phase
from rentwatch.core.policy import DEFAULT
from rentwatch.core.preflight.proof import exact_entry, sample_positions
from rentwatch.engine.attempt import Attempt
from rentwatch.engine.blame_book import BlameBook
from rentwatch.engine.fleet import Fleet
from rentwatch.engine.hosts.ssh import RunResult, SSHFailure
from rentwatch.engine.hosts.tender import HostTender
from rentwatch.engine.jobs.work import JobWork
from rentwatch.engine.journal import Journal
from rentwatch.ledger import Ledger

from .fake_market import campaign
from .ledgers import new_ledger

DROPPED = RunResult(None, b"", b"", False)  # the channel was cut before the host answered


def said(text: str, code: int | None = 0, err: bytes = b"") -> RunResult:
    return RunResult(code, text.encode(), err, False)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def now(self) -> float:
        return self.t

    def answered_at(self) -> float:
        return self.t


def proven(res: RunResult, command: str) -> RunResult:
    """A scripted good preflight document, answered to the nonce on this run's command line
    as the real probe answers it (core/proof): the host in these tests computes honestly."""
    nonce = re.search(r"--nonce (\d+)", command)
    try:
        doc = json.loads(res.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return res
    mm = doc.get("matmul") if isinstance(doc, dict) else None
    if nonce is None or not doc.get("ok") or not isinstance(mm, dict) or "samples" in mm:
        return res
    n, seed = mm.setdefault("n", 256), int(nonce.group(1))
    mm["nonce"] = seed
    mm["samples"] = [[r, c, float(exact_entry(n, r, c))] for r, c in sample_positions(seed, n)]
    return RunResult(res.exit_status, (json.dumps(doc) + "\n").encode(), res.stderr, res.truncated)


class ScriptedLink:
    """Answers each command with the next scripted result (then repeats the last)."""

    def __init__(self, answers: list[RunResult]) -> None:
        self.answers: Iterator[RunResult] = iter(answers)
        self.last = answers[-1]
        self.calls: list[str] = []

    def _next(self) -> RunResult:
        self.last = next(self.answers, self.last)
        return self.last

    async def run(self, a: Attempt, command: str, **kw: Any) -> RunResult:
        self.calls.append(command)
        return self._next()

    async def probe(
        self, a: Attempt, script: bytes, timeout_wall: float, command: str = "python3 -"
    ) -> RunResult:
        self.calls.append("preflight")
        return proven(self._next(), command)

    def wall(self, market_seconds: float, floor: float) -> float:
        return 0.0

    def io_floor(self) -> float:
        return 0.2


def attempt(iid: int = 7) -> Attempt:
    a = Attempt(iid, None, 70, 7, "RTX 4090", 0.0, 0.3, 0.01)
    a.ssh_host, a.ssh_port = "127.0.0.1", 2222
    return a


def job_work(
    link: ScriptedLink, retries: int = 1, ledger: Ledger | None = None
) -> tuple[JobWork, JobQueue, Ledger]:
    ledger = new_ledger() if ledger is None else ledger
    clock = Clock()
    journal = Journal(ledger, "c", clock, log=lambda _: None)
    queue = JobQueue((Job("train", "python train.py", retries=retries),))
    work = JobWork(queue, Fleet(1), link, journal, clock, artifacts_root=Path("unused"))  # type: ignore[arg-type]
    return work, queue, ledger


def tender_on(link: ScriptedLink, work: JobWork) -> HostTender:
    c = campaign()
    book = BlameBook(work.journal, c)
    return HostTender(link, work, work.journal, DEFAULT, work.clock, c, book)  # type: ignore[arg-type]


def interruptions(ledger: Ledger) -> list[Any]:
    return [e for e in ledger.events() if e.kind == "job_finished" and not e.ok]


def test_a_dropped_status_check_is_no_answer_and_the_job_stays_running():
    link = ScriptedLink([DROPPED])
    work, queue, ledger = job_work(link)
    job = queue.take(7, 1_000.0)
    assert job is not None
    for _ in range(5):  # more drops than the job has retries
        # the tender logs this as "no answer" and looks again at the next check
        with pytest.raises(SSHFailure, match="before the host answered"):
            asyncio.run(work.check(attempt(), job))
    assert job.status == "running" and job.attempts == 1
    assert interruptions(ledger) == []


def test_an_empty_status_output_is_no_answer_either():
    link = ScriptedLink([said("", code=0)])
    work, queue, ledger = job_work(link)
    job = queue.take(7, 1_000.0)
    assert job is not None
    with pytest.raises(SSHFailure, match="printed nothing"):
        asyncio.run(work.check(attempt(), job))
    assert job.status == "running" and interruptions(ledger) == []


def test_one_gone_reading_is_looked_at_again_before_requeueing():
    # a half-delivered answer reads as "none"; the second look finds the job running
    link = ScriptedLink([said("NON"), said("RUNNING\nstep 3\n")])
    work, queue, ledger = job_work(link)
    job = queue.take(7, 1_000.0)
    assert job is not None
    asyncio.run(work.check(attempt(), job))
    assert job.status == "running" and interruptions(ledger) == []
    assert len(link.calls) == 2


def test_a_job_gone_on_two_looks_is_requeued():
    link = ScriptedLink([said("VANISHED\n")])
    work, queue, ledger = job_work(link)
    job = queue.take(7, 1_000.0)
    assert job is not None
    asyncio.run(work.check(attempt(), job))
    assert job.status == "pending"
    (ev,) = interruptions(ledger)
    assert "process is gone" in ev.reason


def test_a_launch_whose_session_dropped_and_no_answer_after_is_not_requeued():
    """The launch runs on the host even when the session dies under it; requeueing then would
    burn a retry and, elsewhere, run the job twice."""

    class LaunchDrops(ScriptedLink):
        async def run(self, a: Attempt, command: str, **kw: Any) -> RunResult:
            self.calls.append(command)
            if len(self.calls) == 1:
                raise SSHFailure("session dropped: ConnectionLost")
            return DROPPED

    link = LaunchDrops([DROPPED])
    work, queue, ledger = job_work(link)
    a = attempt()
    a.life = dataclasses.replace(a.life, phase=Phase.VERIFIED)
    work.fleet.in_service = lambda: [a]  # type: ignore[method-assign]
    asyncio.run(work.dispatch(1_000.0))
    assert queue.on(7) is not None and interruptions(ledger) == []


def test_a_launch_that_got_no_answer_and_never_ran_costs_no_retry():
    """The launch and the look after it got no answer (a bid rental paused under the engine:
    its SSH refused), and later looks find no trace of the job: it never started there, so it
    goes back to the queue without costing a retry (a retry-less job is not failed). Found
    under load: two such launches failed a job whose one retry no run of it had used."""

    class Refused(ScriptedLink):
        async def run(self, a: Attempt, command: str, **kw: Any) -> RunResult:
            self.calls.append(command)
            if len(self.calls) <= 2:  # the launch, and the look after it
                raise SSHFailure("ConnectionRefusedError: [Errno 111]")
            return said("NONE\n")

    link = Refused([said("NONE\n")])
    work, queue, ledger = job_work(link, retries=0)
    a = attempt()
    a.life = dataclasses.replace(a.life, phase=Phase.VERIFIED)
    work.fleet.in_service = lambda: [a]  # type: ignore[method-assign]
    asyncio.run(work.dispatch(1_000.0))
    job = queue.on(7)
    assert job is not None and job.seen_running_at is None  # held as started, never seen
    asyncio.run(work.check(a, job))
    assert job.status == "pending" and job.host_losses == 1
    (ev,) = interruptions(ledger)
    assert "never started" in ev.reason and ev.detail["requeued"]


def test_a_job_seen_running_then_gone_still_costs_a_retry():
    link = ScriptedLink([said("RUNNING\n"), said("NONE\n")])
    work, queue, ledger = job_work(link, retries=0)
    job = queue.take(7, 1_000.0)
    assert job is not None
    asyncio.run(work.check(attempt(), job))  # seen running
    asyncio.run(work.check(attempt(), job))  # then gone, on two looks
    assert job.status == "failed"
    (ev,) = interruptions(ledger)
    assert "process is gone" in ev.reason


def preflight_doc() -> str:
    return json.dumps(
        {
            "probe": "preflight",
            "schema": 1,
            "ok": False,
            "error": {"type": "CudaError", "message": "no kernel image"},
        }
    )


def run_preflight(link: ScriptedLink) -> Attempt:
    work, _, _ = job_work(link)
    tender = tender_on(link, work)
    a = attempt()
    asyncio.run(asyncio.wait_for(tender._preflight(a), 5))
    return a


def test_a_dropped_preflight_session_is_retried_not_judged():
    link = ScriptedLink([DROPPED, DROPPED, said(preflight_doc() + "\n", code=1)])
    a = run_preflight(link)
    assert link.calls == ["preflight"] * 3
    assert a.verdict is not None and a.verdict.failure_class == "cuda_error"


def test_a_dropped_preflight_does_not_count_as_ssh_silence():
    """The host answered SSH; the SSH deadline rule must not read a dropped session as silence."""
    seen: list[str | None] = []

    class Watch(ScriptedLink):
        async def probe(
            self, a: Attempt, script: bytes, timeout_wall: float, command: str = "python3 -"
        ) -> RunResult:
            seen.append(a.ssh_error)
            return await super().probe(a, script, timeout_wall)

    run_preflight(Watch([DROPPED, said(preflight_doc() + "\n", code=1)]))
    assert seen[0] is not None and seen[1] is None


def test_a_shell_that_says_why_it_printed_nothing_is_judged_at_once():
    link = ScriptedLink([said("", code=127, err=b"sh: 1: python3: not found\n")])
    a = run_preflight(link)
    assert link.calls == ["preflight"]
    # judged at once, and as the campaign's (the image has no python3), never the host's
    assert a.verdict is not None and a.verdict.failure_class == "campaign_fault"


def test_a_list_answer_without_the_ssh_route_does_not_leave_the_job_unwatched():
    """One market answer that leaves out a proven host's SSH route is no answer: the tender
    waits for the next one and goes on checking the job (before, it left for good and the job
    stayed 'running' until the campaign's deadline)."""

    class Market:
        time_scale = 600.0

    class Link(ScriptedLink):
        market = Market()

        async def run(self, a: Attempt, command: str, **kw: Any) -> RunResult:
            self.calls.append(command)
            return said("EXIT 0\nfinished\n") if "exit" in command else said("")

    link = Link([said("")])
    work, queue, ledger = job_work(link)
    tender = tender_on(link, work)
    a = attempt()
    a.life = dataclasses.replace(a.life, phase=Phase.VERIFIED)
    job = queue.take(a.instance_id, 1_000.0)
    assert job is not None

    async def go() -> None:
        task = asyncio.create_task(tender.tend(a))
        await asyncio.sleep(0.01)  # the watchdog is armed; then a list answer drops the route
        route = a.ssh_host
        a.ssh_host = None
        await asyncio.sleep(0.05)
        assert not task.done()
        a.ssh_host = route  # the next answer has it again
        for _ in range(200):
            if job.status == "done":
                break
            await asyncio.sleep(0.01)
        a.life = dataclasses.replace(a.life, phase=Phase.STOPPED)
        await asyncio.wait_for(task, 2)

    asyncio.run(go())
    assert job.status == "done"


def test_a_host_lost_soon_after_its_job_started_is_requeued_free_and_a_restart_knows_it():
    link = ScriptedLink([DROPPED])  # never asked: the host is gone
    work, queue, ledger = job_work(link, retries=0)
    job = queue.take(7, work.clock.now())
    assert job is not None
    work.reap(work.clock.now())  # the fleet no longer holds i:7
    assert job.status == "pending" and job.host_losses == 1
    (ev,) = interruptions(ledger)
    assert ev.detail["host_loss"] is True and "no retry used" in ev.reason
    again = JobQueue((Job("train", "python train.py", retries=0),))
    restarted = JobWork(again, Fleet(1), link, work.journal, work.clock, Path("unused"))  # type: ignore[arg-type]
    restarted.restore(ledger)
    assert again.jobs[0].status == "pending" and again.jobs[0].host_losses == 1
