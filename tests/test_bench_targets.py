"""`python -m bench` names a target for every figure docs/benchmarks.md states: each section's
bench module is run by one of the targets, and every target's module exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from bench.__main__ import TARGETS, main

ROOT = Path(__file__).resolve().parent.parent


def test_every_section_of_the_benchmarks_has_a_target():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    headed = set(re.findall(r"^## .*`python -m (bench\.\w+)", text, flags=re.M))
    run = {cmd[cmd.index("-m") + 1] for _, cmd in TARGETS.values()}
    assert headed and headed <= run, headed - run
    for module in run:
        assert importlib.util.find_spec(module) is not None, module


def test_an_unknown_target_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as e:
        main(["nope"])
    assert e.value.code == 2
    assert "unknown target nope" in capsys.readouterr().err
