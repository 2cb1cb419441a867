"""One queue, one applier (`engine/rentals.py`'s `Writer`): every module hands its updates to the
writer instead of calling `apply`, host tasks only emit, and while the poll loop runs its task
alone applies them, in the order they were emitted, as soon as they are.

What a module may assign of a rental is `tests/test_one_writer.py`'s walk; this one is about
who calls the writer, and how."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from types import SimpleNamespace

from rentwatch.engine import rentals
from rentwatch.engine.attempt import Attempt
from rentwatch.engine.journal import Journal
from rentwatch.engine.rounds import rounds
from rentwatch.engine.updates import Set
from rentwatch.ledger import Ledger

from .source_ast import parse

APP = Path(__file__).resolve().parents[1] / "app"
WRITER = "engine/rentals.py"
HOST_TASKS = ("engine/hosts/", "engine/jobs/")  # modules whose code runs in host tasks
HOST_MAY = {"emit"}  # what a host task may ask of the writer


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node, less `if TYPE_CHECKING:` blocks (they do not run)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for b in node.body for n in ast.walk(b))
    return [n for n in ast.walk(tree) if id(n) not in skip]


def violations(module: str, tree: ast.AST) -> list[str]:
    """Where `module` applies an update itself, or (a host-task module) asks the writer for
    more than `emit`, each as `line: what`."""
    found: list[str] = []
    host = module.startswith(HOST_TASKS)
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("rentals"):
            names = {a.name for a in node.names}
            if module != WRITER and ("apply" in names or host):
                found.append(f"{node.lineno}: imports {sorted(names)} from the writer's module")
        if not isinstance(node, ast.Call) or module == WRITER:
            continue
        f = node.func
        named = isinstance(f, ast.Name) and f.id == "apply"
        if named or isinstance(f, ast.Attribute) and ast.unparse(f) == "rentals.apply":
            found.append(f"{node.lineno}: {ast.unparse(node)} (only the writer applies)")
        elif (
            host
            and isinstance(f, ast.Attribute)
            and isinstance(f.value, ast.Attribute)
            and f.value.attr == "writer"
            and f.attr not in HOST_MAY
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)} (a host task only emits)")
    return found


def test_no_module_but_the_writer_applies_and_host_tasks_only_emit():
    bad = {
        f"{m}:{v}"
        for path in sorted(APP.rglob("*.py"))
        for m in [str(path.relative_to(APP))]
        for v in violations(m, parse(path.read_text()))
    }
    assert not bad, f"updates applied outside the writer's queue: {sorted(bad)}"


def test_the_walk_finds_a_planted_violation_of_each_kind():
    poll_side = (
        "from .rentals import apply\n"  # 1: the writer's function imported
        "apply(self.journal, u)\n"  # 2: and called
        "rentals.apply(j, u)\n"  # 3: through its module
        "self.journal.writer.emit(u)\n"  # the queue: fine
        "self.writer.drain()\n"  # the poll's side drains: fine
        "sup.apply(intent)\n"  # the operator's door, not the writer's apply: fine
    )
    lines = [int(v.split(":")[0]) for v in violations("engine/observer.py", parse(poll_side))]
    assert lines == [1, 2, 3]
    host = (
        "from ..rentals import Writer\n"  # 1: a host module needs nothing of the writer's module
        "self.journal.writer.emit(u)\n"  # fine
        "self.journal.writer.drain()\n"  # 3: applying is the poll's
        "await self.journal.writer.run(work)\n"  # 4: so is running as the writer
        "if TYPE_CHECKING:\n    from ..rentals import Writer\n"  # a type only: fine
    )
    lines = [int(v.split(":")[0]) for v in violations("engine/hosts/tender.py", parse(host))]
    assert lines == [1, 3, 4]
    assert violations(WRITER, parse("apply(j, u)\n")) == []


# -- the queue at work --------------------------------------------------------------------------
class Polls:
    """A poll loop's supervisor: one poll, then a long wait (nothing is left to the next poll)."""

    def __init__(self, journal: Journal) -> None:
        self.writer = journal.writer
        self.polls = 0

    async def poll_once(self) -> None:
        self.polls += 1

    def poll_wait(self, cap: float, floor: float) -> float:
        return 60.0


def _journal(tmp_path: Path) -> Journal:
    clock = SimpleNamespace(now=lambda: 50.0)
    return Journal(Ledger(tmp_path / "l.duckdb"), "c", clock, log=lambda _: None)  # type: ignore[arg-type]


def _attempt(iid: int) -> Attempt:
    return Attempt(iid, None, 70 + iid, 1, "RTX 4090", 0.0, 0.3, 0.01)


def test_a_burst_from_host_tasks_is_applied_in_order_once_each_by_the_polls_task(
    tmp_path, monkeypatch
):
    journal = _journal(tmp_path)
    hosts = [_attempt(i) for i in (1, 2, 3)]
    emitted: list[tuple[int, str]] = []
    applied: list[tuple[int, str, asyncio.Task | None, int]] = []
    sup = Polls(journal)
    real = rentals.apply

    def spy(j, u):
        applied.append((u.a.instance_id, u.fields["job_line"], asyncio.current_task(), sup.polls))
        return real(j, u)

    monkeypatch.setattr(rentals, "apply", spy)

    async def host_task(a: Attempt) -> None:
        for k in range(5):
            emitted.append((a.instance_id, f"line {k}"))
            journal.writer.emit(Set(a, {"job_line": f"line {k}"}))
            await asyncio.sleep(0)  # the others emit in between

    async def body() -> None:
        loop = asyncio.ensure_future(rounds(sup, lambda: False))
        await asyncio.sleep(0.05)  # the first poll is done; the loop waits its 60 s
        await asyncio.gather(*(host_task(a) for a in hosts))
        for _ in range(100):  # the wait wakes for them: no poll is needed
            if len(applied) == len(emitted):
                break
            await asyncio.sleep(0.01)
        tasks = {t for _, _, t, _ in applied}
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        assert tasks == {loop}, "only the poll's task applies"

    asyncio.run(body())
    assert [(i, line) for i, line, _, _ in applied] == emitted  # in order, once each
    assert len(emitted) == 15 and {p for *_, p in applied} == {1}  # between two polls
    assert [h.job_line for h in hosts] == ["line 4"] * 3
    assert not journal.writer.queued


def test_a_persons_intent_handed_over_runs_on_the_polls_task(tmp_path):
    journal = _journal(tmp_path)
    sup = Polls(journal)
    appliers: list[asyncio.Task | None] = []

    async def door() -> str:
        appliers.append(asyncio.current_task())
        return "ran"

    async def body() -> None:
        loop = asyncio.ensure_future(rounds(sup, lambda: False))
        await asyncio.sleep(0.05)
        assert await asyncio.wait_for(journal.writer.run(door), 5) == "ran"
        assert appliers == [loop]
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)

    asyncio.run(body())
    assert sup.polls == 1


def test_with_no_poll_loop_an_update_is_applied_where_it_is_emitted(tmp_path):
    """Before the first poll and at the end's release nothing runs beside the caller."""
    journal = _journal(tmp_path)
    a = _attempt(1)

    async def body() -> None:
        journal.writer.emit(Set(a, {"job_line": "said"}))
        assert a.job_line == "said" and not journal.writer.queued

    asyncio.run(body())
