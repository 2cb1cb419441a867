from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import hypothesis  # noqa: F401  (imported now, not by its plugin's end-of-run summary)
import pytest
from rentwatch.referee.stepped import stepped_clock
from rentwatch.sim.scenario import parse_scenario
from rentwatch.sim.server import SimServer

from .team_pg import pg_server, team_db  # noqa: F401  (the team store's PostgreSQL fixtures)

# Why hypothesis is imported above: under CPython 3.11.7, after `test_artifact_pull`'s pull cut
# by its deadline ran after another pull in one process, a later compile failed "AST constructor
# recursion depth mismatch" (an interpreter fault; its cause was not found). Hypothesis's plugin
# imported it lazily at the run's summary, so a run whose tests all passed ended in that
# traceback. Imported here, it is compiled before any test runs.


def _compile_once() -> None:
    """Where writing bytecode is off (PYTHONDONTWRITEBYTECODE), every process the suite starts
    (each xdist worker, each CLI, controller and simulator it runs) compiled rentwatch, and
    each worker rewrote every test module, again: about 10 s of CPU per worker and half a
    second per process. Compiled once instead, into a cache outside the source tree
    (PYTHONPYCACHEPREFIX), which the processes started from here inherit."""
    if not sys.dont_write_bytecode:
        return
    from platformdirs import user_cache_dir

    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or str(Path(user_cache_dir("rentwatch")) / "pyc")
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


_compile_once()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def runtime(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's controllers register in a folder of its own (the registry `rentwatch ls`
    reads), never in the user's: a test run shows no phantom campaign there. Beside the test's
    `tmp_path`, not in it (tests list what their commands wrote there)."""
    d = tmp_path_factory.mktemp("run") / "rentwatch"
    monkeypatch.setenv("RENTWATCH_RUNTIME_DIR", str(d))
    return d


@contextlib.contextmanager
def market_stands(sim: SimServer) -> Iterator[None]:
    """The simulator's clock stands still inside (its market time passes no more), then runs
    on from where it stood: a test's wall-time step (a CLI process starting on a loaded box)
    costs the market nothing, so what the test means happens before the market moves on."""
    sim.call(sim.market.clock.stepped)
    try:
        yield
    finally:
        sim.call(sim.market.clock.flowing)


@pytest.fixture
def make_sim() -> Iterator:
    servers: list[SimServer] = []

    def make(api_key: str = "test-key", stepped: bool = False, **scenario) -> SimServer:
        """`stepped`: the market's clock moves only when the engine, run in this process on
        it (`tests/campaigns.py` `headless`), waits with nothing out: the test's market time
        does not depend on the box's load (app/referee/stepped.py). Its scale is 1."""
        clock = stepped_clock() if stepped else None
        server = SimServer(parse_scenario(scenario), api_key=api_key, clock=clock)
        server.start_in_thread()
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.stop_thread()
