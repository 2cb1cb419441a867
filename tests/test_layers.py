"""The layers hold: the pure core imports no I/O library (checked on the source, so it fails
the day one sneaks in, and at run time); the engine's modules form no import cycle, read no
clock of their own, and reach into no other object's private members; the core's
subpackages each hold one concern."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

from .source_ast import parse

FORBIDDEN = {
    "textual",
    "httpx",
    "asyncssh",
    "duckdb",
    "asyncio",
    "socket",
    "subprocess",
    "time",
    "pynvml",
}
APP = Path(__file__).resolve().parent.parent / "app"
CORE = APP / "core"
# where the clocks come from: the market client is the market clock; the simulator runs one
CLOCK_SOURCES = {"market/vast/transport.py", "notify/notifier.py"}


@functools.cache
def _parsed(source: str) -> ast.Module:
    return parse(source)


def _tree(path: Path) -> ast.Module:
    """`path` parsed, once per text for the whole module: the tests below walk the same app
    (about 0.4 s of CPU to parse it whole). Read only: no test changes a tree."""
    return _parsed(path.read_text())


def _engine_modules() -> list[Path]:
    return [p for p in APP.rglob("*.py") if "sim" not in p.relative_to(APP).parts]


def test_core_is_pure():
    offenders = []
    for path in CORE.rglob("*.py"):
        tree = _tree(path)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert not offenders, offenders


def test_importing_the_core_loads_no_io_module():
    mods = sorted(
        ".".join(("rentwatch", *p.relative_to(APP).with_suffix("").parts))
        for p in CORE.rglob("*.py")
        if p.stem != "__init__"
    )
    assert "rentwatch.core.blame.fault" in mods  # the subpackages are read too
    code = (
        f"import sys\nbefore = set(sys.modules)\nfor m in {mods!r}: __import__(m)\n"
        f"print(sorted(m for m in set(sys.modules) - before"
        f" if m.split('.')[0] in {sorted(FORBIDDEN)!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


ROOT = APP.parent
# where each folder installs (pyproject/setup.py): app/ is `rentwatch`
INSTALLED = {"app": "rentwatch", "widgets": "rentwatch.widgets", "probes": "rentwatch.probes"}
# the layers, lowest first: a package imports only from lower ranks (and within itself);
# packages of one rank are independent of each other
RANKS = {
    "core": 0,
    "ledger": 1,
    "market": 1,
    "sim": 1,
    "notify": 1,
    "engine": 2,
    "views": 3,
    "widgets": 4,
    "run": 5,
    "referee": 6,
    "cli": 7,
    "__main__": 8,
}


def _module(path: Path) -> tuple[str, bool]:
    folder = path.relative_to(ROOT).parts[0]
    parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    if is_pkg:
        parts = parts[:-1]
    return ".".join([INSTALLED[folder], *parts]), is_pkg


def _all_imports(path: Path) -> set[str]:
    """Every rentwatch module `path` imports, relative or absolute, at module level or inside a
    function (TYPE_CHECKING blocks left out: they do not run)."""
    mod, is_pkg = _module(path)
    package = mod.split(".") if is_pkg else mod.split(".")[:-1]
    tree = _tree(path)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for b in node.body for n in ast.walk(b)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "rentwatch"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "rentwatch":
                out.add(target)
                out |= {f"{target}.{a.name}" for a in node.names}  # `from pkg import module`
    return out


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _sources(*folders: str) -> list[Path]:
    return [p for f in folders for p in sorted((ROOT / f).rglob("*.py"))]


def test_every_package_has_a_layer():
    packages = {p.name for p in APP.iterdir() if (p / "__init__.py").exists()}
    assert packages | {"widgets"} <= set(RANKS), packages - set(RANKS)


def test_imports_point_down():
    """core <- market, ledger, sim, notify <- engine <- views <- widgets <- run <- referee <- cli:
    nothing imports upward or sideways, and the probes (shipped to hosts) import nothing of
    ours."""
    offenders = []
    for path in _sources("app", "widgets", "probes"):
        mod, _ = _module(path)
        here = _layer(mod)
        for target in _all_imports(path):
            there = _layer(target)
            if there == here or not there or there not in RANKS:
                if here == "probes" and target.startswith("rentwatch"):
                    offenders.append(f"{mod} -> {target} (probes import nothing of ours)")
                continue
            if here == "probes" or not here:
                offenders.append(f"{mod} -> {target}")
            elif RANKS[there] >= RANKS[here]:
                offenders.append(f"{mod} ({here}) -> {target} ({there})")
    assert not offenders, offenders


def test_the_layers_test_sees_an_upward_import(tmp_path):
    """The check above is not vacuous: an engine module importing a view is caught."""
    src = tmp_path / "x.py"
    src.write_text("from ..views.snapshot import FleetReadout\nfrom rentwatch.cli import main\n")
    fake = APP / "engine" / "_layers_probe_.py"
    fake.write_text(src.read_text())
    try:
        got = _all_imports(fake)
    finally:
        fake.unlink()
    assert {"rentwatch.views.snapshot", "rentwatch.cli"} <= got


def _imports(path: Path) -> set[str]:
    """The app modules `path` imports, as paths under app/ (for the cycle test)."""
    out = set()
    for target in _all_imports(path):
        parts = target.split(".")[1:]
        while parts and not (
            (APP / Path(*parts)).with_suffix(".py").exists()
            or (APP / Path(*parts) / "__init__.py").exists()
        ):
            parts = parts[:-1]
        if parts and parts[0] not in ("widgets", "probes"):
            out.add("/".join(parts))
    return out


def test_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for p in _engine_modules():
        name = str(p.relative_to(APP).with_suffix(""))
        if name.endswith("__init__"):
            name = name[: -len("/__init__")] or "app"
        graph[name] = _imports(p) - {name}
    seen: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(n: str, trail: list[str]) -> None:
        seen[n] = 1
        for m in sorted(graph.get(n, ())):
            if seen.get(m) == 1:
                raise AssertionError(f"import cycle: {' -> '.join([*trail, n, m])}")
            if m not in seen:
                visit(m, [*trail, n])
        seen[n] = 2

    for n in sorted(graph):
        if n not in seen:
            visit(n, [])


def test_no_module_reads_the_clock_itself():
    """Time is injected: only the clock sources call time.time()/monotonic() (a default
    argument naming `time.time` is an injection point, not a read)."""
    offenders = []
    for p in _engine_modules():
        if str(p.relative_to(APP)) in CLOCK_SOURCES:
            continue
        for node in ast.walk(_tree(p)):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in (
                "time.time",
                "time.monotonic",
                "datetime.now",
                "datetime.datetime.now",
            ):
                offenders.append(f"{p.relative_to(APP)}:{node.lineno}")
    assert not offenders, offenders


def test_no_reaching_into_private_members():
    offenders = []
    for p in _engine_modules():
        for node in ast.walk(_tree(p)):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                offenders.append(f"{p.relative_to(APP)}:{node.lineno} {ast.unparse(node)}")
    assert not offenders, offenders


def _core_unit(path: Path) -> str:
    """A core module's concern: its subpackage, or the module itself at the top of core."""
    rel = path.relative_to(CORE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _core_units() -> dict[str, set[str]]:
    """Which of the core's concerns each concern imports (TYPE_CHECKING imports left out)."""
    graph: dict[str, set[str]] = {}
    for p in CORE.rglob("*.py"):
        here = _core_unit(p)
        for target in _all_imports(p):
            parts = target.split(".")
            if parts[:2] != ["rentwatch", "core"] or len(parts) < 3:
                continue
            there = parts[2]
            if there != here:
                graph.setdefault(here, set()).add(there)
    return graph


def test_core_subpackages_hold_one_concern_each():
    """The core is split by concern, not by length: its subpackages (bidding, blame, offers,
    preflight, worth) stand in an order, none importing another that imports it back, directly
    or through other subpackages, so each reads on its own and on what is below it."""
    subpackages = {p.parent.name for p in CORE.glob("*/__init__.py")}
    assert {"bidding", "blame", "offers", "preflight", "worth"} <= subpackages
    graph = {
        k: {n for n in v if n in subpackages} for k, v in _core_units().items() if k in subpackages
    }
    cycles = []
    for start in sorted(graph):
        seen, todo = set(), list(graph[start])
        while todo:
            n = todo.pop()
            if n == start:
                cycles.append(start)
                break
            if n not in seen:
                seen.add(n)
                todo += graph.get(n, ())
    assert not cycles, f"core subpackages that import each other round about: {cycles}"


def test_no_module_is_a_catch_all():
    """A generous sanity bar, not a split rule: a module past it holds more than one concern."""
    long = [
        f"{p.relative_to(ROOT)}: {n}"
        for p in _sources("app", "widgets")
        if (n := len(p.read_text().splitlines())) > 1000
    ]
    assert not long, long
