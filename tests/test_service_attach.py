"""`rentwatch watch` and `rentwatch demo` start their engine as a controller process and attach
to it (app/service/spawn.py): quitting with *Leave running* leaves the controller serving (`ls`
lists it, a later dashboard attaches), quitting with *Stop campaign* ends it with nothing left
running, and a controller that dies is said to have died."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from rentwatch.cli.main import main
from rentwatch.ledger import Ledger
from rentwatch.run.service import registry
from rentwatch.run.service.remote import RemoteEngine
from rentwatch.run.service.spawn import ControllerFailed, attach_dashboard, connect
from rentwatch.run.service.target import Target, resolve
from rentwatch.widgets.fleet import FleetView
from rentwatch.widgets.messages import EngineFailed, FleetSnapshot

from .campaigns import campaign_text
from .ledgers import new_ledger

JOB = """
[[jobs]]
name = "long"
run = "sleep 3600"
"""


def _ls() -> list[dict]:
    """`rentwatch ls --json`, run here: the command as a process is tests/test_service.py's."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ls", "--json"]) == 0
    return json.loads(out.getvalue())


def _live(sim) -> set[int]:
    t = sim.call(sim.market.truth)
    return {
        r["id"]
        for r in t["instances"]
        if r["destroyed_at"] is None and r["actual_status"] != "stopped"
    }


def _until(cond, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} never met")


def _quit(target: Target, proc, keys: tuple[str, ...]) -> tuple[str | None, int]:
    """The real dashboard attached to `target`: wait for a live instance, press `keys`, and
    return the dialog's choice and the exit code the command would give."""
    app, finish = attach_dashboard(target, proc, wait_s=120)
    app.refresh_s = 0.1

    async def drive() -> None:
        async with app.run_test(size=(150, 45)) as pilot:
            view = app.query_one(FleetView)
            for _ in range(600):
                if any(s.ended_at is None for s in view.snaps):
                    break
                await pilot.pause(0.1)
            assert any(s.ended_at is None for s in view.snaps), "nothing on the dashboard"
            await pilot.press(keys[0])
            for _ in range(100):
                if len(app.screen_stack) > 1:
                    break
                await pilot.pause(0.1)
            await pilot.press(*keys[1:])
            for _ in range(600):
                if not app.is_running:
                    break
                await pilot.pause(0.1)

    result = None
    try:
        asyncio.run(drive())
        result = app.return_value
    finally:
        code = finish(result)
    return result, code


def _kill(pid: int | None) -> None:
    if pid is not None and registry.pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def test_watch_leaves_its_controller_running_then_a_second_dashboard_stops_it(
    make_sim, tmp_path, runtime
):
    sim = make_sim(seed=7, offers=60, time_scale=240)
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("w", 1, JOB))
    ledger = (tmp_path / "l.duckdb").resolve()
    argv = ["--market-url", sim.url, "--campaign", str(camp), "--ssh-key", str(tmp_path / "k")]
    env = dict(os.environ, VAST_API_KEY=sim.api_key)
    target, proc = connect(argv, ledger, "w", env)
    assert proc is not None and os.getsid(proc.pid) == proc.pid  # its own session
    try:
        # q, then Tab from "Stop campaign" to "Leave running"
        assert _quit(target, proc, ("q", "tab", "enter")) == ("leave", 0)
        time.sleep(1)
        assert proc.poll() is None, "leaving stopped the controller"
        assert _live(sim), "leaving stopped the fleet"
        [row] = _ls()
        assert row["campaign"] == "w" and row["pid"] == proc.pid

        # `watch` again on that ledger attaches to it; another campaign there is refused
        again, none = connect(argv, ledger, "w", env)
        assert none is None and again.socket == target.socket
        with pytest.raises(ControllerFailed, match="held by the controller of campaign 'w'"):
            connect(argv, ledger, "other", env)

        assert _quit(again, None, ("q", "enter")) == ("stop", 0)  # Stop has the focus
        assert proc.wait(30) == 0
        assert _live(sim) == set(), "stopping left something running"
        assert _ls() == [] and not Path(target.socket or "").exists()
    finally:
        _kill(proc.pid)


def test_demo_runs_its_market_in_the_controller_and_survives_the_dashboard(tmp_path, runtime):
    ledger = (tmp_path / "demo.duckdb").resolve()
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))  # its SSH key lands here
    argv = ["--demo", "--time-scale", "120", "--seed", "7"]
    target, proc = connect(argv, ledger, None, env)
    assert proc is not None
    try:
        assert "built-in simulator at http" in Path(str(ledger) + ".log").read_text()
        assert _quit(target, proc, ("x", "enter")) == ("leave", 0)  # x: Leave running focused
        time.sleep(1)
        assert proc.poll() is None, "leaving ended the demo"
        [row] = _ls()
        assert row["campaign"] == "demo" and row["pid"] == proc.pid
        # its market and key, where a user can point `offers`, `plan` and `reconcile` at them
        key_file = Path(row["market_key_file"])
        assert row["market_url"].startswith("http://127.0.0.1:")
        assert key_file.stat().st_mode & 0o077 == 0
        key = key_file.read_text().strip()
        listed = httpx.get(
            row["market_url"] + "/api/v1/instances/",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert listed.status_code == 200 and listed.json()["instances"]
        assert key not in Path(str(ledger) + ".log").read_text() and key not in json.dumps(row)
        # `rentwatch attach` (the only one running) sees the market still moving
        found = resolve()
        assert found.socket == target.socket
        # a second `demo` on that ledger attaches to the running one
        again, none = connect(argv, ledger, None, env)
        assert none is None and again.socket == target.socket
        assert _quit(found, None, ("q", "enter")) == ("stop", 0)
        _until(lambda: proc.poll() is not None, 120, "the controller's exit")
        assert proc.returncode == 0
        assert _ls() == [] and not Path(target.socket or "").exists()
        assert not key_file.exists()  # the market, and its key, ended with the controller
    finally:
        _kill(proc.pid)
    led = Ledger(ledger, read_only=True)
    said = led.query("select * from events", limit=100_000)
    assert key not in json.dumps([list(r) for r in said.rows], default=str)
    rows = led.instance_rows()
    assert rows and all(r["stopped_at"] or r["destroyed_at"] for r in rows), rows


def test_a_dead_controller_is_said_to_be_dead(make_sim, tmp_path, runtime):
    sim = make_sim(seed=7, offers=20, time_scale=60)
    ledger = (tmp_path / "l.duckdb").resolve()
    env = dict(os.environ, VAST_API_KEY=sim.api_key)
    argv = ["--market-url", sim.url, "--ssh-key", str(tmp_path / "k")]  # observe only
    target, proc = connect(argv, ledger, "watch", env)
    assert proc is not None
    engine = RemoteEngine(target, pid=proc.pid)
    said: list[str] = []
    got: list = []
    engine.on_error, engine.on_snapshot = said.append, got.append
    engine.start()
    try:
        _until(lambda: got, 120, "a snapshot")
        assert got[-1].observe_only
        proc.kill()
        proc.wait(10)
        _until(lambda: any("has died" in s for s in said), 120, "the death said")
        assert f"pid {proc.pid}" in said[-1] and "Nothing supervises" in said[-1]
    finally:
        engine.shutdown("leave")
        _kill(proc.pid)
    assert _ls() == []  # the dead one's entry is swept


def _said_until(tmp_path, monkeypatch, done, what: str, events=None) -> list[str]:
    """What a dashboard's engine said of a controller (pid 4242, its socket gone) until
    `done(said)`, retrying at once; `events`, if given, is its stream. Patched on this engine
    alone: another RemoteEngine still reconnecting in this process (a test's leftover) would
    take a patched class's answers first."""
    monkeypatch.setattr("rentwatch.run.service.remote.RECONNECT_S", 0.05)
    engine = RemoteEngine(Target(socket=str(tmp_path / "nobody.sock")), pid=4242)
    if events is not None:
        monkeypatch.setattr(engine, "_events", events)
    said: list[str] = []
    engine.on_error = said.append
    engine.start()
    try:
        _until(lambda: done(said), 60, what)
    finally:
        engine.shutdown("leave")
    return said


def test_a_death_seen_late_is_still_said(tmp_path, monkeypatch):
    # a killed controller closes its socket a moment before its pid stops answering signal 0:
    # the first break reads as "out of reach", and the death must be said once it shows
    answers = iter([True, True])  # alive at the first break and at the first retry
    alive = registry.pid_alive
    monkeypatch.setattr(
        registry, "pid_alive", lambda pid: next(answers, False) if pid == 4242 else alive(pid)
    )
    said = _said_until(
        tmp_path, monkeypatch, lambda said: any("has died" in s for s in said), "the death said"
    )
    assert "reconnecting" in said[0] and "has died" not in said[0]
    assert sum("has died" in s for s in said) == 1  # said once, not at every retry


def test_a_controller_that_said_bye_and_exited_did_not_die(tmp_path, monkeypatch):
    # a campaign's end: the controller says `bye`, ends its stream and exits; the dashboard
    # must not then call it dead ("Nothing supervises the fleet now")
    import httpx

    calls = {"n": 0}

    async def events():
        calls["n"] += 1
        if calls["n"] == 1:
            yield "bye", {"reason": "campaign finished"}
            return
        raise httpx.ConnectError("no socket")

    monkeypatch.setattr(registry, "pid_alive", lambda pid: False)
    said = _said_until(
        tmp_path, monkeypatch, lambda _: calls["n"] >= 3, "two reconnects tried", events
    )
    assert said == ["the controller is shutting down: campaign finished"], said


def test_a_dashboard_leaving_before_its_stream_began_leaves_nothing_reconnecting(tmp_path):
    # quitting as the engine starts (a dashboard that failed at mount): its thread had not yet
    # made its loop, the halt was never sent, and the thread reconnected for the rest of the
    # process, taking what a later test patched on RemoteEngine
    begin = threading.Event()

    class HeldBack(RemoteEngine):
        def _main(self) -> None:
            begin.wait()
            super()._main()

    engine = HeldBack(Target(socket=str(tmp_path / "nobody.sock")))
    engine.start()
    engine.shutdown("leave", timeout=0.1)  # returns with the thread still held back
    begin.set()
    engine._thread.join(30)  # a ceiling: unfixed, it never ends
    assert not engine.alive()


def test_the_loss_stays_on_the_bar_over_a_snapshot_not_yet_drawn():
    # the last snapshot before the stream broke may still be waiting for the next refresh:
    # drawing it must not wipe the line that says the controller is gone
    from rentwatch.widgets.app import RentwatchApp
    from textual.widgets import Static

    from .test_snapshots import FLEET, StillEngine

    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(120, 35)) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            app.post_message(EngineFailed("lost the controller: its process (pid 7) has died"))
            await pilot.pause(0.3)
            assert "has died" in str(app.query_one("#bar", Static).render())
            app.post_message(EngineFailed("reconnected to the controller at unix:/x"))  # no failure
            await pilot.pause(0.1)
            assert "has died" in str(app.query_one("#bar", Static).render())

    asyncio.run(run())


def test_a_killed_process_not_yet_reaped_is_dead():
    # a controller killed after its dashboard (its parent) left is reaped by init, if ever:
    # until then signal 0 still reaches it, and `ls`, the dead-controller line and quitting's
    # wait would all take it for alive
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert registry.pid_alive(child.pid)
        child.kill()
        _until(lambda: not registry.pid_alive(child.pid), 10, "the zombie judged dead")
    finally:
        child.wait(10)


def test_quitting_with_stop_waits_on_a_remote_controller_by_its_answers(tmp_path):
    # over a forwarded socket or TCP the controller's pid names a process elsewhere: the
    # wait for its exit asks its API instead, and a stop is done once nothing answers
    from rentwatch.run.service.controller import Controller
    from rentwatch.run.service.server import ServiceServer
    from rentwatch.run.service.spawn import _is_local, _wait_gone

    async def main() -> None:
        server = ServiceServer(Controller("far", tmp_path / "l.duckdb"))
        await server.start(tmp_path / "s.sock", ("127.0.0.1", 0), tmp_path / "l")
        token = server.token_file.read_text().strip() if server.token_file else None
        target = Target(url=server.url, token=token)
        try:
            assert not _is_local(target, os.getpid())
            assert not await asyncio.to_thread(_wait_gone, target, None, None, 0.5)
        finally:
            await server.stop()
        assert await asyncio.to_thread(_wait_gone, target, None, None, 5.0)

    asyncio.run(main())


def test_a_demo_nobody_watches_or_kept_ends_itself(tmp_path, runtime):
    """Issue 29, item 8: a demo whose terminal was closed left its controller running for
    over an hour. One nobody watches, and nobody chose to leave running, stops what it holds
    and exits once its window passes; one a person left running ("Leave running") does not."""
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    window = ["--end-unwatched-min", "0.1"]  # six seconds
    argv = ["--demo", "--time-scale", "120", "--seed", "7", *window]
    kept_ledger = (tmp_path / "kept.duckdb").resolve()
    target, kept = connect(argv, kept_ledger, None, env)
    assert kept is not None
    proc = None
    try:
        # watched before the other demo starts: starting a controller took longer than the
        # window on a loaded box, which ended this one, unwatched, before it was attached to
        watcher = RemoteEngine(target, pid=kept.pid)
        got: list = []
        watcher.on_snapshot = got.append
        watcher.start()
        _until(lambda: got, 120, "a snapshot")  # a ceiling: the demo starts on a loaded box
        ledger = (tmp_path / "demo.duckdb").resolve()
        _, proc = connect(argv, ledger, None, env)
        assert proc is not None
        time.sleep(8)  # past the window, watched all along: it runs on
        assert kept.poll() is None
        from rentwatch.run.service.remote import ControllerClient

        client = ControllerClient(target)
        client.keep()  # what the quit dialog's Leave running sends
        client.close()
        watcher.shutdown("leave")
        _until(lambda: proc.poll() is not None, 240, "the unwatched demo's end")
        assert proc.returncode == 0
        log = Path(str(ledger) + ".log").read_text()
        assert "nobody has watched for" in log
        led = Ledger(ledger, read_only=True)
        rows = led.instance_rows()
        assert rows and all(r["stopped_at"] or r["destroyed_at"] for r in rows), rows
        # no person stopped anything: the stops are the rule's (they read `human` before)
        actors = {e.actor for e in led.events(where="kind IN ('stop', 'destroy')")}
        assert actors and "human" not in actors, actors
        led.close()
        time.sleep(7)  # the kept one, unwatched past its window too, runs on
        assert kept.poll() is None
    finally:
        _kill(kept.pid)
        if proc is not None:
            _kill(proc.pid)
    _until(lambda: kept.poll() is not None, 60, "the kept demo's stop")


def test_a_second_demo_started_before_the_first_registered_attaches_to_it(
    tmp_path, runtime, monkeypatch
):
    """Two `rentwatch demo` started within a second: the second looked before the first had
    registered, started its own controller, which found the ledger locked, and it failed
    ("is open in another rentwatch process", exit 2) instead of attaching, as the README says
    a second demo does."""
    from rentwatch.run.service import spawn

    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"))
    argv = ["--demo", "--time-scale", "120", "--seed", "7"]
    ledger = (tmp_path / "demo.duckdb").resolve()
    first, proc = connect(argv, ledger, None, env)
    assert proc is not None
    try:
        looks = []
        real_find = registry.find

        def late_find(**kw):  # the first look comes before the first demo registered
            looks.append(kw)
            return [] if len(looks) == 1 else real_find(**kw)

        monkeypatch.setattr(spawn.registry, "find", late_find)
        second, proc2 = connect(argv, ledger, None, env)
        assert proc2 is None and second.socket == first.socket
    finally:
        _kill(proc.pid)
    _until(lambda: proc.poll() is not None, 60, "the demo's stop")
