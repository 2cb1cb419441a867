"""One writer of a rental's state: this walks every module of `app/` and fails where one
writes what is not its own.

- A rental's lifecycle (`Attempt.life`, an immutable record) is replaced by `engine/rentals.py`
  alone, and nothing anywhere writes a frozen record behind its back (`object.__setattr__`).
- The attempt's methods that change it are called by the writer alone: everyone else emits
  an update (`engine/updates.py`).
- The supervisor's own state (`finished`, `detach_asked`, its campaign) and the actions'
  `ended` are assigned by their owner only (`self.`): others call its methods.

Calls are matched by method name, whatever the receiver: where another object has a method of
the same name, the modules that call it are named below (`ELSEWHERE`)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from rentwatch.engine.attempt import Attempt

from .source_ast import parse

APP = Path(__file__).resolve().parents[1] / "app"
WRITER = "engine/rentals.py"
ATTEMPT = "engine/attempt.py"
READS = {"view", "charges", "worst_charges"}
MUTATORS = {
    n for n, f in inspect.getmembers(Attempt, inspect.isfunction) if not n.startswith("_")
} - READS
# other objects' methods of the same name, and where they are called
ELSEWHERE = {
    "answered": {"market/vast/transport.py"},
    "listed": {"sim/describe.py", "sim/market.py"},
    "outbid": {"engine/observer.py", "engine/tier.py", "run/alerts.py"},
}
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


def _on_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def violations(module: str, tree: ast.AST) -> list[str]:
    """What `module` writes that is not its own, each as `line: what`."""
    found: list[str] = []
    for node in ast.walk(tree):
        for t in _targets(node):
            if not isinstance(t, ast.Attribute):
                continue
            in_life = isinstance(t.value, ast.Attribute) and t.value.attr == "life"
            if in_life or (t.attr == "life" and module != WRITER):
                found.append(f"{t.lineno}: {ast.unparse(t)} = ... (only {WRITER} replaces it)")
            elif t.attr in OWNED and not _on_self(t.value):
                found.append(f"{t.lineno}: {ast.unparse(t)} = ... (its owner's to assign)")
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "__setattr__":
            found.append(f"{node.lineno}: {ast.unparse(node)} (a frozen record written)")
        elif isinstance(f, ast.Name) and f.id == "setattr" and module.startswith("engine/"):
            found.append(f"{node.lineno}: {ast.unparse(node)} (a field set by name)")
        elif isinstance(f, ast.Attribute) and f.attr in MUTATORS and module != WRITER:
            if module == ATTEMPT and _on_self(f.value) or module in ELSEWHERE.get(f.attr, ()):
                continue  # one of its methods using another; another object's method
            found.append(f"{node.lineno}: {ast.unparse(node)} (an update's, {WRITER})")
    return found


def test_no_module_but_the_writer_writes_a_rentals_state():
    bad = {
        f"{m}:{v}"
        for path in sorted(APP.rglob("*.py"))
        for m in [str(path.relative_to(APP))]
        for v in violations(m, parse(path.read_text()))
    }
    assert not bad, f"rental state written outside {WRITER}: {sorted(bad)}"


def test_the_walk_knows_the_attempts_methods():
    """Every method of `Attempt` that writes is in the walk (a new one is by construction),
    and the names shared with other objects are its methods still."""
    assert {"came_up", "status_seen", "mark", "outbid", "judged"} <= MUTATORS
    assert set(ELSEWHERE) <= MUTATORS


def test_the_walk_finds_a_planted_violation_of_each_kind():
    src = (
        "a.life = a.life.moved(to, at, why)\n"  # 1: the lifecycle, outside the writer
        "object.__setattr__(a.life, 'phase', p)\n"  # 2: a frozen record written
        "a.came_up(now)\n"  # 3: an update's method called directly
        "held.touched(at, act)\n"  # 4: whatever the receiver's name
        "sup.finished = Outcome(True, 'x')\n"  # 5: another object's state
        "sup.actions.ended = (actor, why)\n"  # 6
        "self.finished = done\n"  # its own: fine
        "x = a.life.phase\n"  # a read: fine
        "a.view()\n"  # a read: fine
    )
    lines = [int(v.split(":")[0]) for v in violations("engine/elsewhere.py", parse(src))]
    assert sorted(lines) == [1, 2, 3, 4, 5, 6]
    # the writer may do what it is for; a named caller its not-yet method
    assert violations(WRITER, parse("a.life = x\na.came_up(now)\n")) == []
    # and the attempt's own methods may not touch it either
    own = "self.life.proven = True\nself.billed_at(price)\nself.life = x\n"
    assert [int(v.split(":")[0]) for v in violations(ATTEMPT, parse(own))] == [1, 3]
    assert violations("sim/market.py", parse("box.listed()\n")) == []
