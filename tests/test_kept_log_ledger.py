"""A job's kept log belongs to the ledger that ran it: the artifacts folder is the campaign
name's, so a second campaign of that name on another ledger finds the first one's log there.
Found by a newcomer: `rentwatch demo --ledger demo3.duckdb` ended before job demo-4 started,
and `rentwatch logs demo-4` and the jobs screen printed demo2's whole log as "kept when it
ended"."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from rentwatch.cli.jobs import kept_output, ledger_rows
from rentwatch.engine.jobs.output import log_path
from rentwatch.ledger import Ledger
from rentwatch.views.jobs import read_output

from .ledgers import new_ledger
from .test_empty_answers import attempt
from .test_job_restore import PullLink, _work


def _output(ledger: Ledger, root: Path, name: str) -> tuple[str, str]:
    work = _work(ledger, PullLink(sftp_up=True), root)
    sup = SimpleNamespace(
        jobs=work.queue, campaign=SimpleNamespace(name="c"), attempts={}, job_work=work,
        ledger=ledger, link=work.link,
    )  # fmt: skip
    got = asyncio.run(read_output(sup, name))  # type: ignore[arg-type]
    return got.text, got.source


def _other_ledgers_log(root: Path) -> None:
    path = log_path(root, "c", "train")
    path.parent.mkdir(parents=True)
    path.write_text("another ledger's run of train\n")


def test_a_log_another_ledger_kept_is_not_this_jobs_output(tmp_path):
    _other_ledgers_log(tmp_path)
    ledger = new_ledger()
    assert _output(ledger, tmp_path, "train") == ("", "not started yet")


def test_a_requeued_end_keeps_no_log_so_the_folders_log_is_not_shown(tmp_path):
    _other_ledgers_log(tmp_path)
    ledger = new_ledger()
    ledger.record(
        "job_finished", at=50, actor="engine", ok=False, reason="interrupted", instance_id=7,
        campaign="c", detail={"job": "train", "requeued": True, "attempt": 1},
    )  # fmt: skip
    text, source = _output(ledger, tmp_path, "train")
    assert text == "" and "kept" not in source


def test_the_log_kept_at_this_ledgers_end_of_the_job_is_shown(tmp_path):
    _other_ledgers_log(tmp_path)  # here: this run's, written at the end below
    ledger = new_ledger()
    work = _work(ledger, PullLink(sftp_up=True), tmp_path)
    work.journal.fact(
        "job_finished", attempt(7), actor="engine", ok=True, reason="exited 0",
        detail={"job": "train", "exit_code": 0, "attempt": 1},
    )  # fmt: skip
    assert _output(ledger, tmp_path, "train") == (
        "another ledger's run of train\n",
        "the log kept when it ended",
    )


def test_the_cli_reads_a_job_that_never_ran_here_as_not_started(tmp_path):
    _other_ledgers_log(tmp_path)
    path = tmp_path / "mine.duckdb"
    with Ledger(path) as ledger:
        ledger.record(
            "campaign_start", at=0, actor="engine", reason="start", campaign="c",
            detail={"jobs": ["train"]},
        )  # fmt: skip
    [(campaign, row)] = ledger_rows(path, "c")
    assert kept_output(path, campaign, row) == ("", "not started yet: no output")
