"""`rentwatch logs JOB` when the ledger has a job of that name in several campaigns (each demo
run has its `demo-1`): with a controller running one of them its job is shown, as before, and
stderr now says which campaign that is, which others have the job and how to pick one (as
`kubectl logs` names the container it chose); without one it refuses, listing them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from rentwatch.cli import jobs
from rentwatch.cli.main import main
from rentwatch.views.jobs import JobRow


def _row(job: str, state: str = "done") -> JobRow:
    return JobRow(job, state, 7, "RTX 3090 m:1", 1.0, 0.0, 0.1, 1)


ROWS = [("demo", _row("demo-1")), ("demo-2", _row("demo-1")), ("demo-3", _row("demo-1"))]


class FakeRemote:
    def __init__(self) -> None:
        self.closed = False

    def job_log(self, name: str) -> SimpleNamespace:
        return SimpleNamespace(text="step 1\nstep 2\n", source="off its host", live=False)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def ledger(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(jobs, "ledger_rows", lambda ledger, campaign: list(ROWS))
    path = tmp_path / "l.duckdb"
    path.touch()
    return path


def test_the_running_controllers_job_is_shown_and_the_others_named(ledger, monkeypatch, capsys):
    remote = FakeRemote()
    monkeypatch.setattr(jobs, "_controller", lambda ledger, campaign: (remote, "demo-3"))
    assert main(["logs", "demo-1", "--ledger", str(ledger)]) == 0
    got = capsys.readouterr()
    assert got.out == "step 1\nstep 2\n"
    assert "job demo-1 of campaign demo-3: off its host" in got.err
    assert "2 other campaign(s) have a job demo-1: demo, demo-2" in got.err
    assert "--campaign NAME" in got.err and remote.closed


def test_a_campaign_named_is_taken_without_a_word_about_the_others(ledger, monkeypatch, capsys):
    monkeypatch.setattr(jobs, "_controller", lambda ledger, campaign: (FakeRemote(), campaign))
    assert main(["logs", "demo-1", "--campaign", "demo-3", "--ledger", str(ledger)]) == 0
    err = capsys.readouterr().err
    assert "of campaign demo-3" in err and "other campaign" not in err


def test_without_a_controller_several_campaigns_are_refused_with_their_names(
    ledger, monkeypatch, capsys
):
    monkeypatch.setattr(jobs, "_controller", lambda ledger, campaign: None)
    assert main(["logs", "demo-1", "--ledger", str(ledger)]) != 0
    err = capsys.readouterr().err
    assert "several campaigns (demo, demo-2, demo-3)" in err and "--campaign" in err
