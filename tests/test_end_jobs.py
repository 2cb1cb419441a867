"""A campaign's end settles the job it interrupts: a person's end (`rentwatch end`, the dashboard's
`E`) while a job runs records that job as ended there, with its output kept, and never queues it
again for a host the ended campaign will not rent; a job that never started stays pending, and
the header still shows the campaign's own cap on creates."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rentwatch.cli.jobs import kept_output, ledger_rows
from rentwatch.core.campaign import Job
from rentwatch.core.jobs import JobQueue
from rentwatch.engine.intents import EndIntent
from rentwatch.engine.supervisor import Supervisor
from rentwatch.ledger import Ledger
from rentwatch.views.jobs import live, read_output
from rentwatch.views.snapshot import snapshot

from .campaigns import run_campaign
from .ledgers import new_ledger
from .test_empty_answers import attempt
from .test_job_restore import PullLink, _work

# a sized job (two reference hours: it is at work when the end comes) that prints as it starts,
# and one the single host never gets to
JOBS = """
[[jobs]]
name = "long"
run = "echo warming up && mkdir -p out && echo done > out/r.txt"
artifacts = ["out/r.txt"]
ref_gpu = "RTX 4090"
ref_hours = 2.0
retries = 3

[[jobs]]
name = "later"
run = "echo later"
"""
HEALTHY_4090 = [{"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "pull_min": [1, 3]}]


def test_an_end_while_a_job_runs_settles_it_and_keeps_its_output(
    make_sim, tmp_path, monkeypatch, capsys
):
    """On the stepped clock, the engine in this process; the end is the person's intent, asked
    from the engine's own loop once the job's progress is under way, as `rentwatch end` asks a
    running controller."""
    sim = make_sim(
        seed=5,
        offers=20,
        stepped=True,
        host_class=HEALTHY_4090,
    )
    monkeypatch.chdir(tmp_path)  # its artifacts folder is the working directory's
    seen: dict[str, object] = {}
    watching: set[asyncio.Task[None]] = set()

    def end_mid_job(sup: Supervisor) -> None:
        async def watch() -> None:
            job = sup.job_work.queue.by_name("long")
            assert job is not None
            while not (job.status == "running" and job.progress and job.progress >= 0.2):
                await asyncio.sleep(60)  # market seconds
            seen["progress"] = job.progress
            reply = await sup.apply(EndIntent(destroy=True, typed="jobend"))
            assert reply.done, reply.message
            # the dashboard's engine polls on after the end: its next look at the jobs
            sup.job_work.reap(sup.now())
            seen["rows"] = {r.job: r for r in live(sup)}
            seen["output"] = await read_output(sup, "long")
            seen["header"] = snapshot(sup, sup.now())

        watching.add(asyncio.get_running_loop().create_task(watch()))

    code, ledger = run_campaign(
        sim, tmp_path, name="jobend", fleet=1, extra=JOBS, max_creates=30, on_supervisor=end_mid_job
    )
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "interrupted on i:" in out and "queued again" not in out
    [task] = watching
    assert task.done() and task.exception() is None
    rows = seen["rows"]
    assert isinstance(rows, dict)
    assert rows["long"].state == "failed" and rows["long"].finished_at is not None
    assert rows["long"].progress is not None and rows["long"].progress >= 0.2
    assert rows["later"].state == "pending" and rows["later"].attempts == 0
    output = seen["output"]
    assert "warming up" in output.text and "kept" in output.source  # type: ignore[attr-defined]
    header = seen["header"]
    assert header.max_creates == 30 and header.creates >= 1  # type: ignore[attr-defined]

    with Ledger(ledger, read_only=True) as led:
        ends = led.events(where="kind = 'job_finished'")
    [end] = ends
    assert not end.ok and not end.detail["requeued"] and not end.detail["host_fault"]
    assert end.reason.endswith("it ends with the campaign")
    # `rentwatch jobs` and `rentwatch logs` without a controller read the same from the ledger
    by_job = {r.job: r for _, r in ledger_rows(Path(ledger), "jobend")}
    assert by_job["long"].state == "failed" and by_job["later"].state == "pending"
    text, source = kept_output(Path(ledger), "jobend", by_job["long"])
    assert "warming up" in text and "kept" in source


def test_the_queue_at_the_campaigns_end():
    queue = JobQueue(tuple(Job(n, "true", retries=3) for n in ("run", "out", "bad", "new")))
    for n, iid in (("run", 1), ("out", 2), ("bad", 3)):
        job = queue.by_name(n)
        assert job is not None and queue.take(iid, 10.0) is job
    for n, code in (("out", 0), ("bad", 2)):  # exited, their output still coming off
        job = queue.by_name(n)
        assert job is not None
        job.status, job.exit_code = "finishing", code
    assert [j.name for j in queue.campaign_ended(50.0)] == ["run"]
    states = {j.name: (j.status, j.instance_id, j.finished_at) for j in queue.jobs}
    assert states == {
        "run": ("failed", 1, 50.0),  # where it stood, not back in the queue
        "out": ("done", 2, 50.0),
        "bad": ("failed", 3, 50.0),
        "new": ("pending", None, None),  # never started: nothing ended it
    }
    assert queue.pending == 1 and queue.running == 0 and queue.campaign_ended(60.0) == []


def test_a_deadline_that_ends_the_campaign_mid_job_settles_the_job(make_sim, tmp_path, monkeypatch):
    """The rules' end (here the deadline), then the session's release: the job is ended there,
    as a person's end ends it, and its output kept."""
    sim = make_sim(seed=5, offers=20, stepped=True, host_class=HEALTHY_4090)
    monkeypatch.chdir(tmp_path)
    code, ledger = run_campaign(
        sim, tmp_path, name="due", fleet=1, extra="deadline_min = 60\n" + JOBS
    )
    assert code == 3  # the deadline's end is no success
    by_job = {r.job: r for _, r in ledger_rows(Path(ledger), "due")}
    assert by_job["long"].state == "failed" and by_job["later"].state == "done"  # a spare ran it
    text, _ = kept_output(Path(ledger), "due", by_job["long"])
    assert "warming up" in text
    with Ledger(ledger, read_only=True) as led:
        [end] = led.events(where="kind = 'job_finished' AND NOT ok")
    assert "deadline" in end.reason and not end.detail["requeued"]


def test_the_exit_trap_settles_the_job_and_leaves_its_output_on_the_host(
    make_sim, tmp_path, monkeypatch
):
    """The trap (Ctrl-C) lets go of what bills first: the job ends with the campaign, its
    output not pulled, and `rentwatch logs` says so rather than "not started yet"."""
    sim = make_sim(seed=5, offers=20, stepped=True, host_class=HEALTHY_4090)
    monkeypatch.chdir(tmp_path)
    watching: set[asyncio.Task[None]] = set()

    def interrupt_mid_job(sup: Supervisor) -> None:
        main = asyncio.current_task()  # the run's (this is called from inside it)
        assert main is not None

        async def watch() -> None:
            job = sup.job_work.queue.by_name("long")
            while not (job and job.status == "running" and job.progress):
                await asyncio.sleep(60)  # market seconds
            main.cancel()  # as the trap's signal handler cancels it

        watching.add(asyncio.get_running_loop().create_task(watch()))

    code, ledger = run_campaign(
        sim, tmp_path, name="trapped", fleet=1, extra=JOBS, on_supervisor=interrupt_mid_job
    )
    assert code == 128 + 2  # SIGINT, as the trap reads a cancel it did not see a signal for
    by_job = {r.job: r for _, r in ledger_rows(Path(ledger), "trapped")}
    assert by_job["long"].state == "failed" and by_job["long"].attempts == 1
    assert kept_output(Path(ledger), "trapped", by_job["long"]) == ("", "no output recorded")
    with Ledger(ledger, read_only=True) as led:
        [end] = led.events(where="kind = 'job_finished'")
        assert not led.events(where="kind = 'note' AND detail->>'class' = 'job_log'")
    assert "exit trap" in end.reason and not end.detail["requeued"]


def test_a_later_run_of_the_campaign_takes_up_what_its_end_interrupted(tmp_path):
    """Ended, not abandoned: the same campaign run again (after Ctrl-C, say) starts the job
    again, and the end cost it no retry."""
    ledger = new_ledger()
    work = _work(ledger, PullLink(sftp_up=True), tmp_path)
    job = work.queue.take(7, 1_000.0)
    assert job is not None
    work.journal.fact(  # as _launch records a start
        "job_started", attempt(7), actor="engine", ok=True, reason="started",
        detail={"job": job.name, "attempt": 1},
    )  # fmt: skip
    asyncio.run(work.campaign_ended("exit trap: signal SIGINT", keep_output=False))
    assert job.status == "failed"
    again = _work(ledger, PullLink(sftp_up=True), tmp_path)
    again.restore(ledger)
    back = again.queue.by_name(job.name)
    assert back is not None and (back.status, back.instance_id) == ("pending", None)
    assert back.attempts == 1 and back.host_losses == 1
