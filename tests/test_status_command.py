"""A running job's status check (`status_command`), run by a real shell on a job's folder: what it
answers (`parse_status`'s contract), hostile files included, and that it reads the exit code and
the pid with the shell's own `read`: the only processes it starts are `head` and `tail`."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from rentwatch.core.campaign import Job
from rentwatch.engine.jobs.runner import JobStatus, parse_status, status_command

JOB = Job(name="w", run="true")
ALIVE = str(os.getpid())  # a pid that is running: this test's


def _look(home: Path, shell: str, files: dict[str, bytes]) -> tuple[bytes, list[str]]:
    """The status command's answer on a folder holding `files`, and the programs it started
    from PATH (each a shim that writes its name down, then runs the real one)."""
    folder = home / ".rentwatch" / "jobs" / "w"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    shims = home / "bin"
    shims.mkdir()
    started = home / "started"
    for prog in ("cat", "head", "tail", "kill", "printf", "echo", "test", "["):
        real = next(
            (p for d in ("/usr/bin", "/bin") if os.access(p := f"{d}/{prog}", os.X_OK)), None
        )
        if real is None:
            continue
        shim = shims / prog
        shim.write_text(f'#!/bin/sh\necho {prog} >> "{started}"\nexec {real} "$@"\n')
        shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {"HOME": str(home), "PATH": str(shims)}
    out = subprocess.run([shell, "-c", status_command(JOB)], env=env, capture_output=True).stdout
    names = started.read_text().split() if started.exists() else []
    return out, names


CASES = [
    ({"exit": b"0\n", "pid": b"1\n", "log": b"done\n"}, JobStatus("exited", 0, "done\n")),
    ({"exit": b"137\n", "progress": b"0.5\n"}, JobStatus("exited", 137, "", 0.5)),
    ({"exit": b"x\n"}, JobStatus("exited", -1, "")),
    ({"exit": b""}, JobStatus("exited", -1, "")),
    ({"pid": ALIVE.encode() + b"\n", "progress": b"55%\n"}, JobStatus("running", None, "", 0.55)),
    ({"pid": ALIVE.encode()}, JobStatus("running", None, "")),  # no newline at its end
    ({"pid": b"999999999\n", "log": b"step 3\n"}, JobStatus("vanished", None, "step 3\n")),
    ({"pid": b"not a pid\n"}, JobStatus("vanished", None, "")),
    ({}, JobStatus("none", None, "")),
    # the progress file is the job's: its first line within 32 bytes, read as a number or not
    ({"pid": ALIVE.encode(), "progress": b"0.1\n0.2\n"}, JobStatus("running", None, "", 0.1)),
    ({"pid": ALIVE.encode(), "progress": b"9" * 10_000}, JobStatus("running", None, "")),
    ({"pid": ALIVE.encode(), "progress": b"\\c0.7\n"}, JobStatus("running", None, "")),
    (
        {"pid": ALIVE.encode(), "progress": b"\n0.5\n", "log": b"\x1b]0;t\x07x\n"},
        JobStatus("running", None, "\x1b]0;t\x07x\n"),
    ),
    ({"log": b"a" * 2000}, JobStatus("none", None, "a" * 1500)),
]


@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
@pytest.mark.parametrize(("files", "want"), CASES)
def test_the_status_check_answers_by_its_contract(tmp_path, shell, files, want):
    if not os.access(shell, os.X_OK):
        pytest.skip(f"no {shell} here")
    out, started = _look(tmp_path, shell, files)
    assert parse_status(out) == want
    # the exit code and the pid are the shell's own reads; only head (the progress file, when
    # there is one) and tail (the log) start a process
    assert sorted(started) == sorted(["tail"] + (["head"] if "progress" in files else []))
