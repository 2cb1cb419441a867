"""The pure core imports no I/O library: checked on the source, so it fails the day one sneaks in."""

from __future__ import annotations

import ast
from pathlib import Path

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
CORE = Path(__file__).resolve().parent.parent / "app" / "core"


def test_core_is_pure():
    offenders = []
    for path in CORE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert not offenders, offenders
