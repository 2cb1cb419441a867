"""The simulated job's checkpoint: the engine tells a job where its checkpoint lives
(`RENTWATCH_CHECKPOINT`), the simulated host saves the job's training state there as it
goes, and a launch that finds a state (pushed back from the last host) starts from it. A
state a host forged or broke starts nothing it does not hold."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from rentwatch.core.campaign import Job
from rentwatch.engine.jobs.runner import checkpoint_word, launch_command
from rentwatch.sim import work_meter
from rentwatch.sim.work_meter import checkpoint_folder, saved_work, state_file

from .test_sized_jobs import _rented

JOB = Job(
    name="fit",
    run="python train.py",
    checkpoint="ckpt/",
    ref_gpu="RTX 4090",
    ref_hours=1.0,
)


@pytest.mark.parametrize(
    ("workdir", "checkpoint", "word"),
    [
        (".", "ckpt/", '"$HOME"/ckpt'),
        ("~/proj", "ckpt", '"$HOME"/proj/ckpt'),
        ("/workspace", "runs/a", "/workspace/runs/a"),
        (".", "my ckpt", "\"$HOME\"/'my ckpt'"),
    ],
)
def test_the_checkpoint_path_is_one_shell_word_from_the_workdir(workdir, checkpoint, word):
    assert checkpoint_word(dataclasses.replace(JOB, workdir=workdir, checkpoint=checkpoint)) == word


def test_a_launch_finds_the_state_its_checkpoint_holds_and_saves_as_it_goes(tmp_path: Path):
    market, inst = _rented("healthy")
    cmd = launch_command(JOB)
    assert checkpoint_folder(cmd, tmp_path) == tmp_path / "ckpt"
    (tmp_path / "ckpt").mkdir()
    state_file(tmp_path / "ckpt", "fit").write_text("0.25\n")
    state_file(tmp_path / "ckpt", "other").write_text("0.9\n")  # another job's: not this one's
    meter = work_meter.launch(inst, cmd, tmp_path, inst.segments[-1].running_at)
    assert meter is not None and meter.work_ref_h == meter.resumed_ref_h == 0.25
    rate = inst.machine.real_tflops / meter.ref_tflops / 3600
    work_meter.advance(meter, inst, meter.at + 0.1 / rate, None)
    assert abs(meter.work_ref_h - 0.35) < 1e-6  # from where the state left off
    work_meter.write_progress(meter)
    assert abs(float(state_file(tmp_path / "ckpt", "fit").read_text()) - 0.35) < 1e-5
    assert float((meter.folder / "progress").read_text()) == pytest.approx(0.35, abs=1e-4)


@pytest.mark.parametrize(
    ("text", "held"), [("nan", 0.0), ("-3", 0.0), ("1e9", 1.0), ("junk", 0.0), ("", 0.0)]
)
def test_a_broken_or_forged_state_holds_no_more_than_the_job(tmp_path: Path, text, held):
    state_file(tmp_path, "fit").write_text(text)
    assert saved_work(tmp_path, "fit", 1.0) == held
    assert saved_work(None, "fit", 1.0) == 0.0


def test_a_job_without_a_checkpoint_or_one_outside_home_starts_from_nothing(tmp_path: Path):
    no_ckpt = dataclasses.replace(JOB, checkpoint=None)
    assert "RENTWATCH_CHECKPOINT" not in launch_command(no_ckpt)
    assert checkpoint_folder(launch_command(no_ckpt), tmp_path) is None
    outside = dataclasses.replace(JOB, workdir="/workspace")
    assert checkpoint_folder(launch_command(outside), tmp_path) is None
    up = dataclasses.replace(JOB, workdir="..")
    assert checkpoint_folder(launch_command(up), tmp_path) is None
