"""The referee's workers end with it (app/referee/workers.py). Before, a SIGTERM to `rentwatch
referee` left its worker processes running whole campaigns, with their simulated hosts'
processes and folders, long after it was gone."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rentwatch.referee.workers import run_in_workers

ROOT = Path(__file__).resolve().parents[1]


def _square(x: int) -> int:
    return x * x


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is refused")
    time.sleep(0.2)
    return x


def _die_on_two(x: int) -> int:
    if x == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30 if x > 2 else 0)
    if x > 2:  # slept through: the run was waited for
        Path(os.environ["RENTWATCH_TEST_SLEPT"]).touch()
    return x


def test_results_come_back_in_order():
    assert run_in_workers(_square, list(range(7)), 3) == [x * x for x in range(7)]
    assert not multiprocessing.active_children()


def test_one_runs_error_is_raised_whole_and_ends_every_worker():
    with pytest.raises(ValueError, match="three is refused"):
        run_in_workers(_fail_on_three, list(range(8)), 2)
    assert not multiprocessing.active_children()


def test_a_worker_that_dies_ends_the_others_and_says_so(tmp_path, monkeypatch):
    slept = tmp_path / "slept"
    monkeypatch.setenv("RENTWATCH_TEST_SLEPT", str(slept))  # the workers inherit it
    with pytest.raises(RuntimeError, match="worker ended"):
        run_in_workers(_die_on_two, [0, 1, 2, 3, 4], 2, end_wait_s=5)
    assert not slept.exists()  # the run asleep for 30 s was ended, not waited for
    assert not multiprocessing.active_children()


def _ours(tmp: Path) -> list[int]:
    """Live processes started under this test's TMPDIR (the referee, its workers, their hosts'
    watchdogs and jobs all inherit it)."""
    mark = f"TMPDIR={tmp}".encode()
    pids = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in env.read_bytes().split(b"\0"):
                pid = int(env.parent.name)
                state = (env.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    pids.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    return pids


def _start_referee(tmp: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    cmd = [sys.executable, "-m", "rentwatch", "referee", "--family", "4", "--family-seed", "77"]
    cmd += ["--campaign", str(ROOT / "bench" / "sized_campaign.toml"), "--policies", "default"]
    cmd += ["--workers", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    # both workers have a market with hosts booting before the signal
    while len(list(tmp.glob("rentwatch-sim-*/i*"))) < 2 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)
    return proc


def _gone(tmp: Path, within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while (left := _ours(tmp)) and time.monotonic() < deadline:
        time.sleep(0.3)
    return left


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_referee_ends_its_workers_and_their_hosts(tmp_path, sig):
    proc = _start_referee(tmp_path)
    proc.send_signal(sig)
    rc = proc.wait(60)
    assert rc == 130, proc.stderr.read() if proc.stderr else ""
    assert _gone(tmp_path, 10) == []
    # each run stopped its market on its way out: no host folder, no run folder left
    assert list(tmp_path.glob("rentwatch-*")) == []
    assert b"Traceback" not in (proc.stderr.read() if proc.stderr else b"")


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_workers_of_a_killed_referee_end_themselves(tmp_path):
    proc = _start_referee(tmp_path)
    proc.kill()
    proc.wait(10)
    assert _gone(tmp_path, 45) == []
    assert list(tmp_path.glob("rentwatch-*")) == []
