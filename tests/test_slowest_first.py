"""The suite's slowest-first list (tests/conftest.py) names tests that exist: a renamed or
deleted slow test would otherwise drop silently to its place in collection order."""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import SLOWEST_FIRST
from .source_ast import parse

ROOT = Path(__file__).resolve().parent.parent


def test_each_slowest_first_entry_is_a_test_of_the_suite():
    defined: dict[str, set[str]] = {}
    for entry in SLOWEST_FIRST:
        path, _, name = entry.partition("::")
        if path not in defined:
            assert (ROOT / path).is_file(), entry
            tree = parse((ROOT / path).read_text())
            defined[path] = {
                n.name
                for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            }
        assert name.split("[")[0] in defined[path], entry
    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)
