"""No rental is created, stopped, started or destroyed in the engine unless a decision or a
person asked for it (issue 24): the rules in core/ decide, the executor carries it out, and
the operator's intents are a person's decisions. This walks every engine module's syntax tree
for calls on `Actions` (the only code that changes a rental) and on the market's four
mutating calls, and fails on any call site not listed here with what asked for it."""

from __future__ import annotations

import ast
from pathlib import Path

from .source_ast import parse

ENGINE = Path(__file__).resolve().parents[1] / "app" / "engine"
MUTATORS = {"create_instance", "stop_instance", "start_instance", "destroy_instance"}

# (module, function) -> what asked for the change; a decision executor names its parameter
ASKED: dict[tuple[str, str], str] = {
    ("executor.py", "Executor.execute"): "d: Decision (a Stop)",
    ("executor.py", "Executor.create"): "d: Create",
    ("executor.py", "Executor.abandon"): "d: Abandon",
    ("executor.py", "Executor.restart"): "d: Restart",
    ("tier.py", "TierWatch.move"): "d: Move",
    ("prices.py", "PriceWatch.move_off"): "v: PriceVerdict (a rejected price increase)",
    ("operator.py", "Operator._stop"): "a person: StopIntent, through Operator.apply",
    ("operator.py", "Operator._start"): "a person: StartIntent, through Operator.apply",
    ("operator.py", "Operator._destroy"): "a person: DestroyIntent with its confirmation",
    ("operator.py", "Operator._create"): "a person: CreateIntent, through Operator.apply",
    # the one release rule: a person's EndIntent (rentwatch end, the dashboard's E), or the
    # session's release (the exit trap: a dying controller leaks nothing)
    ("release.py", "_release_one"): "a person's end, or Supervisor.release_all at the exit",
    # a stopped rental of the campaign's own that passed its preflight is started again rather
    # than a stranger created (actor rule:reuse): only where the fleet has room for one
    ("recovery.py", "Recovery._reuse_stopped"): "the fleet's room, met by a proven rental",
}
# calls on `Actions` that change no rental: waiting for the creates in flight to answer
READS = {"landed"}
# decision executors must take the decision they carry out
DECISION_TYPES = {"Decision", "Create", "Abandon", "Stop", "Move", "Restart", "PriceVerdict"}


def call_sites(root: Path = ENGINE) -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "actions.py":
            continue  # the one place that talks to the market about a rental

        def visit(node: ast.AST, where: list[str], rel: str = rel) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    visit(child, [*where, child.name])
                    continue
                if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                    owner = child.func.value
                    via_actions = isinstance(owner, ast.Attribute) and owner.attr == "actions"
                    changes = via_actions and child.func.attr not in READS
                    if changes or child.func.attr in MUTATORS:
                        found.setdefault((rel, ".".join(where)), set()).add(child.func.attr)
                visit(child, where)

        visit(parse(path.read_text()), [])
    return found


def test_every_change_to_a_rental_was_asked_for():
    found = call_sites()
    unasked = {k: v for k, v in found.items() if k not in ASKED}
    assert not unasked, f"rentals changed where no decision or person asked: {unasked}"
    stale = set(ASKED) - set(found)
    assert not stale, f"listed as changing rentals, but no longer do: {stale}"
    assert all(not (calls & MUTATORS) for calls in found.values()), "the market called directly"


def test_each_decision_executor_takes_the_decision_it_carries_out():
    for (rel, qual), why in ASKED.items():
        if not why.startswith(("d: ", "v: ")):
            continue
        tree = parse((ENGINE / rel).read_text())
        cls, name = qual.split(".")
        (fn,) = [
            f
            for c in tree.body
            if isinstance(c, ast.ClassDef) and c.name == cls
            for f in c.body
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name == name
        ]
        annotations = {ast.unparse(a.annotation) for a in fn.args.args if a.annotation}
        assert annotations & DECISION_TYPES, f"{qual} carries out no decision: {annotations}"


def test_the_walk_finds_a_call_that_nobody_asked_for(tmp_path):
    """The walk itself: a module that stops a rental on its own, or calls the market's
    destroy behind the actions' back, is caught."""
    (tmp_path / "rogue.py").write_text(
        "class Watcher:\n"
        "    async def look(self, a):\n"
        "        await self.actions.stop(a, 'x', 'y')\n"
        "        await self.market.destroy_instance(a.instance_id)\n"
    )
    assert call_sites(tmp_path) == {("rogue.py", "Watcher.look"): {"stop", "destroy_instance"}}
