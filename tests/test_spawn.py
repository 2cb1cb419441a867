"""[J] Starting a controller of its own for the dashboard (app/service/spawn.py), without a
market: the wait for it covers its engine's own start, a controller that never answers is
ended rather than left to rent with nobody watching, and leaving one whose registry entry is
already gone says so instead of crashing. Each runs in a second or two."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from rentwatch.run.service import registry, spawn
from rentwatch.run.service.controller import READY_S
from rentwatch.run.service.spawn import ControllerFailed, spawn_controller

# a stand-in controller: never registers; on SIGTERM it "releases" (writes so) and exits
SLOW_CHILD = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def term(*_):
    out.write_text("released")
    sys.exit(143)
signal.signal(signal.SIGTERM, term)
out.with_suffix(".up").write_text("up")
while True:
    time.sleep(0.1)
"""


def test_the_start_wait_covers_the_engines_wait_to_be_up_and_served():
    # a controller whose engine takes 100 s to come up was given up on at 60 s while it went
    # on to serve (and rent) with no dashboard attached
    assert spawn.START_S > READY_S


def test_a_controller_that_does_not_answer_in_time_is_terminated(tmp_path, runtime, monkeypatch):
    marker = tmp_path / "child.txt"
    real = subprocess.Popen
    children: list[subprocess.Popen[bytes]] = []

    def stand_in(args, **kw):
        children.append(real([sys.executable, "-c", SLOW_CHILD, str(marker)], **kw))
        return children[-1]

    monkeypatch.setattr(spawn.subprocess, "Popen", stand_in)
    calls = [0]

    def clock() -> float:  # time runs out once the child has set up its exit trap
        calls[0] += 1
        return 1e9 if calls[0] > 1 and marker.with_suffix(".up").exists() else 0.0

    try:
        with pytest.raises(ControllerFailed, match="did not answer.*SIGTERM") as got:
            spawn_controller(["controller"], tmp_path / "l.duckdb", monotonic=clock)
        assert "releases whatever it holds" in str(got.value)
        (child,) = children
        assert child.wait(10) == 143 and marker.read_text() == "released"
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait(10)


def test_leaving_a_controller_whose_entry_is_gone_says_so(tmp_path, runtime, capsys):
    import asyncio

    from rentwatch.run.service.controller import Controller
    from rentwatch.run.service.server import ServiceServer
    from rentwatch.run.service.target import Target

    async def main() -> int:
        server = ServiceServer(Controller("gone", tmp_path / "l.duckdb"))
        await server.start(tmp_path / "s.sock")
        sock = str(server.socket_path)
        registry.register(
            registry.Entry("gone", os.getpid(), sock, str(tmp_path / "l.duckdb"), time.time())
        )
        try:
            _, finish = await asyncio.to_thread(spawn.attach_dashboard, Target(socket=sock))
            registry.unregister(os.getpid())  # it unregistered while the dashboard was open
            return await asyncio.to_thread(finish, "leave")
        finally:
            await server.stop()

    code = asyncio.run(main())
    out = capsys.readouterr().out
    assert code == 0 and "gone" in out and "re-attach" not in out
    assert "no longer serves" in out


def test_two_controllers_of_one_name_are_told_apart_by_pid(tmp_path, runtime):
    """Two demos on one account (issue 29, item 6): `attach --campaign demo` names both and
    says how to choose, `--pid` picks one, and the line a dashboard leaves on quitting
    carries the pid, so it works however many are running."""
    import socket as sk

    from rentwatch.run.service import api
    from rentwatch.run.service.target import Target, resolve

    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    listeners = []
    try:
        for i, p in enumerate(sleepers):
            path = str(tmp_path / f"c{i}.sock")
            s = sk.socket(sk.AF_UNIX, sk.SOCK_STREAM)
            s.bind(path)
            s.listen(8)
            listeners.append(s)
            registry.register(
                registry.Entry("demo", p.pid, path, str(tmp_path / f"l{i}.duckdb"), time.time())
            )
        with pytest.raises(api.ServiceError, match="2 controllers are running") as exc:
            resolve(campaign="demo")
        assert "--pid" in str(exc.value) and all(str(p.pid) in str(exc.value) for p in sleepers)
        assert resolve(campaign="demo", pid=sleepers[1].pid).socket == str(tmp_path / "c1.sock")
        assert resolve(pid=sleepers[0].pid).socket == str(tmp_path / "c0.sock")
        with pytest.raises(api.ControllerGone, match="with pid 1\\b"):
            resolve(campaign="demo", pid=1)
        again = spawn._attach_args(Target(socket=str(tmp_path / "c1.sock")), local=True)
        assert again == f"--campaign demo --pid {sleepers[1].pid}"
        assert resolve(*[None] * 4, pid=int(again.split()[-1])).socket.endswith("c1.sock")
    finally:
        for s in listeners:
            s.close()
        for p in sleepers:
            p.kill()
            p.wait(10)


def test_a_controller_that_exits_first_is_quoted_once_and_alone(tmp_path, runtime, monkeypatch):
    # the log is appended to by every controller of the ledger: an earlier one's error is not
    # this one's, and its own "rentwatch:" is not said twice
    ledger = tmp_path / "l.duckdb"
    ledger.with_name("l.duckdb.log").write_text("rentwatch: an earlier run's error\n")
    real = subprocess.Popen
    failing = "import sys; print('rentwatch: bad configuration: no campaign'); sys.exit(2)"
    monkeypatch.setattr(
        spawn.subprocess,
        "Popen",
        lambda args, **kw: real([sys.executable, "-c", failing], **kw),
    )
    with pytest.raises(ControllerFailed) as got:
        spawn_controller(["controller"], ledger)
    said = str(got.value)
    assert said.startswith("the controller exited with 2 before serving: bad configuration")
    assert "earlier" not in said and "rentwatch:" not in said
