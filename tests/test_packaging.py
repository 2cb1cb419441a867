"""[P] rentwatch as users install it: a wheel (not an editable install) answers every
command's --help and runs the demo's engine (scripts/installed_check.py, which CI also runs
against a fresh venv)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_installs_and_runs(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("rentwatch-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # every package of the tree ships (found, not listed), with the probes the hosts run
    for folder, name in (
        ("app", "rentwatch"),
        ("widgets", "rentwatch/widgets"),
        ("probes", "rentwatch/probes"),
    ):
        for src in (ROOT / folder).rglob("*.py"):
            rel = src.relative_to(ROOT / folder).as_posix()
            assert f"{name}/{rel}" in names, f"{folder}/{rel} is not in the wheel"
    assert "rentwatch/widgets/app.tcss" in names
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "installed_check.py"),
            "--rentwatch",
            str(site / "bin" / "rentwatch"),
            "--seconds",
            "6",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=400,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "installed-check: ok" in out.stdout
