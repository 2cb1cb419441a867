"""A pytest plugin: each test's CPU seconds (its process's, and its finished child processes',
so a CLI or a referee worker it ran counts) and wall seconds, one line per test in a file, and
at the end their sums and the slowest by CPU. CPU, not wall time: on a shared box the load
moves the wall, and summed over the suite it is the work two cores must get through, however
the workers are scheduled.
Run: python -m pytest -p bench.pytest_cpu --cpu-out cpu.txt [-n 3] tests/...
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SHOWN = 25  # the slowest tests the summary lists


def _cpu_s() -> float:
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-out", help="write each test's CPU and wall seconds to this file")


def pytest_configure(config: pytest.Config) -> None:
    out = config.getoption("--cpu-out")
    if out and not hasattr(config, "workerinput"):  # the run's own process, not an xdist worker
        Path(out).write_text("")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    cpu, wall = _cpu_s(), time.monotonic()
    yield
    out = item.config.getoption("--cpu-out")
    if out:  # one short line per append: the xdist workers share the file
        with open(out, "a") as f:
            f.write(f"{_cpu_s() - cpu:.2f}\t{time.monotonic() - wall:.2f}\t{item.nodeid}\n")


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    out = config.getoption("--cpu-out")
    if not out or hasattr(config, "workerinput"):
        return
    rows = [line.split("\t") for line in Path(out).read_text().splitlines() if line]
    rows.sort(key=lambda r: -float(r[0]))
    cpu, wall = sum(float(r[0]) for r in rows), sum(float(r[1]) for r in rows)
    write = terminalreporter.write_line
    write(f"CPU per test: {len(rows)} tests, {cpu:.0f} s of CPU, {wall:.0f} s of wall summed")
    for c, w, nodeid in rows[:SHOWN]:
        write(f"{float(c):8.2f} s CPU {float(w):8.2f} s wall  {nodeid}")
