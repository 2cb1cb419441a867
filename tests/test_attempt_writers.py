"""An `Attempt` changes only through its own methods, each named for what happened (issue 24:
its fields were assigned from nine modules). This walks every module of `app/` for an
assignment to one of its fields, or a list method on its marks or samples, on anything but
`self`, and fails on one outside `engine/attempt.py`: the methods there are the one writer,
but for its lifecycle record (`life`), which `engine/rentals.py` replaces
(`tests/test_one_writer.py`)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from app.engine.attempt import Attempt

from .source_ast import parse

APP = Path(__file__).resolve().parents[1] / "app"
FIELDS = {f.name for f in dataclasses.fields(Attempt)}
LIST_WRITES = {"append", "extend", "remove", "insert", "pop", "clear", "sort"}
# an Attempt goes by these names wherever the engine holds one
NAMES = {"a", "att", "attempt", "held", "seen", "adopted"}


def writes(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []

    def on_attempt(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id in NAMES

    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [
                t
                for tgt in node.targets
                for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])
            ]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr in FIELDS and on_attempt(t.value):
                found.append((t.lineno, f"{ast.unparse(t)} = ..."))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LIST_WRITES
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr in {"marks", "samples"}
            and on_attempt(node.func.value.value)
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_attempts_change_only_through_their_methods():
    outside = {
        f"{path.relative_to(APP)}:{line}": what
        for path in sorted(APP.rglob("*.py"))
        if path != APP / "engine" / "attempt.py"
        for line, what in writes(parse(path.read_text()))
        if not (path == APP / "engine" / "rentals.py" and what == "a.life = ...")
    }
    assert not outside, f"Attempt fields written outside its methods: {outside}"


def test_the_walk_finds_each_kind_of_write():
    """The checker itself: each way of writing a field is caught; reads and `self` are not."""
    src = (
        "a.status = 'x'\n"
        "a.ssh_host, a.ssh_port = h, p\n"
        "held.unseen += 1\n"
        "a.marks.append(m)\n"
        "x = a.status\n"
        "self.status = 'y'\n"
        "inst.status = 'z'\n"
    )
    assert [line for line, _ in writes(parse(src))] == [1, 2, 2, 3, 4]
