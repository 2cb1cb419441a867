"""One writer of a rental's state: this walks every module of `app/` and fails where one
writes what is not its own.

- A rental's fields (`Attempt`'s, its lifecycle `life` and its marks and samples too) are
  assigned by `engine/rentals.py` alone: everyone else emits an update (`engine/updates.py`),
  and `Attempt` has no method that writes itself. An attempt goes by a few names wherever the
  engine holds one (`NAMES`); `life` is matched on any receiver.
- Nothing anywhere writes a frozen record behind its back (`object.__setattr__`), and no
  engine module but the writer sets a field by name (`setattr`).
- The supervisor's own state (`finished`, `detach_asked`, its campaign) and the actions'
  `ended` are assigned by their owner only (`self.`): others call its methods."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from rentwatch.engine.attempt import Attempt

from .source_ast import parse

APP = Path(__file__).resolve().parents[1] / "app"
WRITER = "engine/rentals.py"
ATTEMPT = "engine/attempt.py"
FIELDS = {f.name for f in dataclasses.fields(Attempt)}
LIST_WRITES = {"append", "extend", "remove", "insert", "pop", "clear", "sort"}
# an Attempt goes by these names wherever the engine holds one
NAMES = {"a", "att", "attempt", "held", "seen", "adopted"}
# another object's state, assigned by its owner only
OWNED = {"finished", "detach_asked", "detached", "file_campaign", "campaign", "ended", "ended_by"}


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [
            t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])
        ]
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    return []


def _named(node: ast.expr, names: set[str]) -> bool:
    return isinstance(node, ast.Name) and node.id in names


def _rental(module: str, node: ast.expr) -> bool:
    """Whether `node` is a rental here: one of its names, or `self` in `Attempt`'s module."""
    return _named(node, NAMES) or module == ATTEMPT and _named(node, {"self"})


def violations(module: str, tree: ast.AST) -> list[str]:
    """What `module` writes that is not its own, each as `line: what`."""
    found: list[str] = []
    writer = module == WRITER
    for node in ast.walk(tree):
        for t in _targets(node):
            if not isinstance(t, ast.Attribute):
                continue
            in_life = isinstance(t.value, ast.Attribute) and t.value.attr == "life"
            field = t.attr in FIELDS and _rental(module, t.value)
            if in_life or not writer and (t.attr == "life" or field):
                found.append(f"{t.lineno}: {ast.unparse(t)} = ... (only {WRITER} assigns it)")
            elif t.attr in OWNED and not _named(t.value, {"self"}):
                found.append(f"{t.lineno}: {ast.unparse(t)} = ... (its owner's to assign)")
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "__setattr__":
            found.append(f"{node.lineno}: {ast.unparse(node)} (a frozen record written)")
        elif _named(f, {"setattr"}) and module.startswith("engine/") and not writer:
            found.append(f"{node.lineno}: {ast.unparse(node)} (a field set by name)")
        elif (
            not writer
            and isinstance(f, ast.Attribute)
            and f.attr in LIST_WRITES
            and isinstance(f.value, ast.Attribute)
            and f.value.attr in {"marks", "samples"}
            and _rental(module, f.value.value)
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)} (only {WRITER} writes it)")
    return found


def test_no_module_but_the_writer_writes_a_rentals_state():
    bad = {
        f"{m}:{v}"
        for path in sorted(APP.rglob("*.py"))
        for m in [str(path.relative_to(APP))]
        for v in violations(m, parse(path.read_text()))
    }
    assert not bad, f"rental state written outside {WRITER}: {sorted(bad)}"


def test_the_walk_finds_a_planted_violation_of_each_kind():
    src = (
        "a.life = a.life.moved(to, at, why)\n"  # 1: the lifecycle, outside the writer
        "object.__setattr__(a.life, 'phase', p)\n"  # 2: a frozen record written
        "a.status = 'x'\n"  # 3: a field
        "a.ssh_host, a.ssh_port = h, p\n"  # 4: in a tuple
        "held.unseen += 1\n"  # 5: whatever the rental's name, however assigned
        "a.marks.append(m)\n"  # 6: its marks, in place
        "setattr(a, 'status', s)\n"  # 7: by name
        "sup.finished = Outcome(True, 'x')\n"  # 8: another object's state
        "sup.actions.ended = (actor, why)\n"  # 9
        "self.finished = done\n"  # its own: fine
        "self.status = 'y'\n"  # not a rental: fine
        "inst.status = 'z'\n"  # a market row: fine
        "x = a.life.phase\n"  # a read: fine
        "a.view()\n"  # a read: fine
    )
    lines = [int(v.split(":")[0]) for v in violations("engine/elsewhere.py", parse(src))]
    assert sorted(set(lines)) == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    # the writer may do what it is for, but not write a frozen record either
    ok = "a.life = x\na.status = s\na.marks.append(m)\nsetattr(a, n, v)\n"
    assert violations(WRITER, parse(ok)) == []
    assert len(violations(WRITER, parse("object.__setattr__(a.life, 'phase', p)\n"))) == 1
    # and the attempt may not write itself
    own = "self.life.proven = True\nself.unseen = 0\nself.marks.append(m)\nx = self.status\n"
    assert [int(v.split(":")[0]) for v in violations(ATTEMPT, parse(own))] == [1, 2, 3]
