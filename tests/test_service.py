"""The controller as a service: a headless campaign serves its API on a private socket;
`ls` finds it, `ledger` queries it while it runs, dashboards attach and detach without
touching its ledger's truth, a wrong destroy is refused, and a kill -9 is survived."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from rentwatch.engine.intents import (
    CreateIntent,
    DestroyConfirmation,
    DestroyIntent,
    FleetSizeIntent,
    StartIntent,
    StopIntent,
)
from rentwatch.ledger import Ledger
from rentwatch.ledger.readonly import QueryFailed, QueryRefused
from rentwatch.run.service import api
from rentwatch.run.service.controller import Controller
from rentwatch.run.service.remote import ControllerClient, RemoteEngine
from rentwatch.run.service.server import ServiceServer
from rentwatch.run.service.target import Target
from rentwatch.views.snapshot import FleetReadout, InstanceSnap

from .campaigns import campaign_text, headless_cmd, headless_env, truth_at
from .cli_run import run_cli
from .source_ast import parse

JOBS = """
[[jobs]]
name = "a"
run = "{run}"
timeout_min = {timeout_min}

[[jobs]]
name = "b"
run = "{run}"
timeout_min = {timeout_min}
"""


def _start(
    sim, tmp_path: Path, ledger: Path, job_s: float, fleet: int = 2, gate: Path | None = None
) -> subprocess.Popen:
    """A controller whose two jobs sleep `job_s` wall seconds, or with a `gate` run until
    that file exists (a test as long as its checks, not as its worst case under load)."""
    camp = tmp_path / "c.toml"
    run = f"sleep {job_s}" if gate is None else f"until [ -e {gate} ]; do sleep 0.2; done"
    # a gated job ends at the gate, not at its timeout (6 market hours: 90 wall seconds at
    # 240x, which a loaded box's CLI checks outlasted: both jobs timed out, the campaign
    # ended and its socket was gone before the test asked it)
    timeout_min = 360 if gate is None else 10 * 24 * 60
    camp.write_text(campaign_text("svc", fleet, JOBS.format(run=run, timeout_min=timeout_min)))
    return subprocess.Popen(
        headless_cmd(sim, tmp_path, camp, ledger),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=headless_env(sim),
    )


class Reader:
    """Collects a process's stdout in a thread, so waiting on a word never blocks the test."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._t.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.lines.append(line)

    def wait_for(self, word: str, timeout: float = 90) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            hit = next((ln for ln in self.lines if word in ln), None)
            if hit is not None:
                return hit
            time.sleep(0.1)
        raise AssertionError(f"never saw {word!r}: {''.join(self.lines[-20:])}")

    def text(self) -> str:
        self._t.join(10)
        return "".join(self.lines)


def _socket_of(line: str) -> str:
    assert "unix:" in line, line
    return line.split("unix:", 1)[1].strip()


def _live(sim) -> set[int]:
    t = sim.call(sim.market.truth)
    return {
        r["id"]
        for r in t["instances"]
        if r["destroyed_at"] is None and r["actual_status"] != "stopped"
    }


def _watchdog_log(sim, iid: int) -> Path:
    home = sim.call(lambda: sim.ssh.sandbox(sim.market.instances[iid]))
    return Path(home) / ".rentwatch" / "watchdog.log"


def _until(cond, timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} never met")


HALTED = ("exited", "unknown", "offline")  # the statuses the ledger stops a GPU's bill at


def _late_usd(events, truth: dict[int, dict], row: dict) -> float:
    """What the ledger may bill over the market on `row`'s rental: a stop this controller did not
    make (a host's watchdog, a contract's end), or a container that exited or a host that went
    dark on its own, is dated by the poll that saw it (an instance's row says no time for it),
    so the GPU bills up to then, never less. The lag is measured here: each such event's date
    in the ledger less the market's own date of it (at 240x a poll a wall second late is $0.008
    at $0.12/h)."""
    iid, lag = row["instance_id"], 0.0
    for e in events:
        if e.kind == "stop" and e.actor == "market" and e.instance_id == iid:
            before = [t for t in truth[iid]["stops"] if t <= e.at]
            lag += e.at - max(before) if before else 0.0
    seen = sorted(
        e.at
        for e in events
        if e.instance_id == iid and e.kind == "status" and (e.detail or {}).get("status") in HALTED
    )
    for halt in truth[iid].get("halts", []):
        first = next((t for t in seen if t >= halt), None)  # the poll that saw it
        lag += first - halt if first is not None else 0.0
    return lag * float(row["gpu_dph"]) / 3600


def test_the_billing_allowance_is_the_lag_measured_on_stops_the_controller_did_not_make():
    from types import SimpleNamespace as E

    truth = {7: {"stops": [1000.0, 5000.0]}, 8: {"stops": [2000.0]}}
    events = [
        E(kind="stop", actor="market", instance_id=7, at=1240.0),  # seen a poll late
        E(kind="stop", actor="market", instance_id=7, at=5000.0),  # seen as it happened
        E(kind="stop", actor="human", instance_id=8, at=2000.0),  # ours: dated by the market
    ]
    assert _late_usd(events, truth, {"instance_id": 7, "gpu_dph": 0.12}) == pytest.approx(0.008)
    assert _late_usd(events, truth, {"instance_id": 8, "gpu_dph": 0.12}) == 0.0
    # a container that exited on its own, seen by a poll 240 market s later
    truth = {9: {"stops": [], "halts": [3000.0]}}
    events = [
        E(kind="status", actor="engine", instance_id=9, at=2900.0, detail={"status": "running"}),
        E(kind="status", actor="engine", instance_id=9, at=3240.0, detail={"status": "exited"}),
        E(kind="status", actor="engine", instance_id=9, at=3300.0, detail={"status": "exited"}),
    ]
    assert _late_usd(events, truth, {"instance_id": 9, "gpu_dph": 0.12}) == pytest.approx(0.008)


def _assert_ledger_is_the_truth(sim, ledger: Path) -> None:
    led = Ledger(ledger, read_only=True)
    try:
        rows = led.instance_rows()
        events = led.events()
        end = max(e.at for e in events)
    finally:
        led.close()
    truth = truth_at(sim, end)
    late = {r["instance_id"]: _late_usd(events, truth, r) for r in rows}
    total, want = sum(r["total_usd"] for r in rows), sum(t["usd"] for t in truth.values())
    assert rows and want - 0.01 <= total <= want + sum(late.values()) + 0.01
    for r in rows:
        usd, got = truth[r["instance_id"]]["usd"], r["total_usd"]
        assert usd - 0.005 <= got <= usd + late[r["instance_id"]] + 0.005, (r, usd)


# -- no campaign ------------------------------------------------------------------------------
def test_ls_with_nothing_running_is_an_empty_list(runtime):
    out = run_cli("ls", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
    assert "no controller" in run_cli("ls").stdout


# -- the server alone, before its campaign binds ------------------------------------------------
def _with_server(tmp_path: Path, body, tcp: bool = False) -> None:
    async def main() -> None:
        ctrl = Controller("unbound", tmp_path / "l.duckdb")
        server = ServiceServer(ctrl)
        await server.start(tmp_path / "s.sock", ("127.0.0.1", 0) if tcp else None, tmp_path / "l")
        try:
            await body(server)
        finally:
            await server.stop()

    asyncio.run(main())


def test_socket_is_private_and_tcp_refuses_requests_without_the_token(tmp_path):
    async def body(server: ServiceServer) -> None:
        sock = server.socket_path
        assert sock is not None and stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        assert server.token_file is not None
        assert stat.S_IMODE(os.stat(server.token_file).st_mode) == 0o600
        token = server.token_file.read_text().strip()
        async with httpx.AsyncClient(base_url=str(server.url)) as http:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
                r = await http.get("/v1/status", headers=headers)
                assert r.status_code == 401, headers
                assert r.json()["error"]["type"] == "unauthorized"
            r = await http.post("/v1/shutdown", json={"mode": "stop"})
            assert r.status_code == 401  # no action either, not only no reads
            r = await http.get("/v1/status", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200 and r.json()["campaign"] == "unbound"
        # the socket needs no token: its mode bits are the lock
        uds = httpx.AsyncHTTPTransport(uds=str(sock))
        async with httpx.AsyncClient(transport=uds, base_url="http://x") as http:
            assert (await http.get("/v1/status")).status_code == 200

    _with_server(tmp_path, body, tcp=True)
    assert not (tmp_path / "s.sock").exists(), "the socket outlived its server"
    assert not (tmp_path / "l.token").exists(), "the token outlived its server"


def test_a_file_in_the_sockets_place_is_left_alone(tmp_path):
    precious = tmp_path / "s.sock"
    precious.write_text("not a socket")

    async def main() -> None:
        server = ServiceServer(Controller("c", tmp_path / "l.duckdb"))
        with pytest.raises(OSError, match="not a socket"):
            await server.start(precious)

    asyncio.run(main())
    assert precious.read_text() == "not a socket"


def test_bad_requests_get_clear_errors(tmp_path):
    async def body(server: ServiceServer) -> None:
        uds = httpx.AsyncHTTPTransport(uds=str(server.socket_path))
        async with httpx.AsyncClient(transport=uds, base_url="http://x") as http:

            async def post(path: str, content: bytes) -> tuple[int, dict]:
                r = await http.post(path, content=content)
                return r.status_code, r.json()["error"]

            code, err = await post("/v1/intents", b'{"intent": "stop", ')
            assert code == 400 and "not valid JSON" in err["message"]
            code, err = await post("/v1/intents", b'{"intent": "reboot", "instance_id": 1}')
            assert code == 400 and "unknown intent 'reboot'" in err["message"]
            assert "destroy" in err["message"]  # it says which intents exist
            code, err = await post("/v1/intents", b'{"intent": "stop", "instance_id": "7"}')
            assert code == 400 and "instance_id" in err["message"]
            code, err = await post("/v1/intents", b'{"intent": "stop", "instnace_id": 7}')
            assert code == 400 and "instnace_id" in err["message"]
            code, err = await post("/v1/intents", b"[1, 2]")
            assert code == 400 and "JSON object" in err["message"]
            huge = json.dumps({"intent": "create", "pad": "x" * 500_000}).encode()
            code, err = await post("/v1/intents", huge)
            assert code == 413 and err["type"] == "too_large"
            code, err = await post("/v1/shutdown", b'{"mode": "explode"}')
            assert code == 400 and "stop" in err["message"]
            code, err = await post("/v1/query", b'{"sql": 5}')
            assert code == 400
            r = await http.get("/v1/nothing-here")
            assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
            # a well-formed intent before the campaign is up: told to wait, not dropped
            code, err = await post("/v1/intents", b'{"intent": "create"}')
            assert code == 503 and err["type"] == "not_ready"

    _with_server(tmp_path, body)


# -- a running campaign ---------------------------------------------------------------------
def test_campaign_served_while_it_runs(make_sim, tmp_path, runtime):
    sim = make_sim(seed=7, offers=60, time_scale=240)
    ledger = tmp_path / "l.duckdb"
    # the jobs outlast the checks below (they run until the gate opens): an operator's stop
    # after the campaign's end is refused, and this test is about the stop
    gate = tmp_path / "jobs-may-end"
    proc = _start(sim, tmp_path, ledger, job_s=0, gate=gate)
    out = Reader(proc)
    try:
        sock = _socket_of(out.wait_for("controller API on unix:"))
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        assert Path(sock).parent == ledger.parent  # next to the ledger

        listed = json.loads(run_cli("ls", "--json").stdout)
        assert len(listed) == 1
        row = listed[0]
        assert row["campaign"] == "svc" and row["pid"] == proc.pid
        assert row["socket"] == sock and Path(row["ledger"]) == ledger.resolve()

        # a second controller on the same ledger is refused, and leaves the first's socket
        second = subprocess.run(
            headless_cmd(sim, tmp_path, tmp_path / "c.toml", ledger),
            capture_output=True,
            text=True,
            env=headless_env(sim),
            # a ceiling on a hang: beside four CPU-bound processes its start and its refusal
            # took past 60 s (said on stderr, then killed at the ceiling)
            timeout=240,
        )
        assert second.returncode == 2 and "already answers" in second.stderr, second.stderr
        assert Path(sock).exists() and proc.poll() is None

        # a query while the campaign holds the ledger for writing: answered through it
        q = run_cli("ledger", "--ledger", str(ledger), "--json", "select count(*) n from events")
        assert q.returncode == 0, q.stderr
        assert json.loads(q.stdout)[0]["n"] > 0
        stable = "select seq, ts, wall, actor, kind, phase, ok, detail from events where seq <= 4"
        through = {fmt: run_cli("ledger", "--ledger", str(ledger), *fmt, stable) for fmt in FORMATS}
        refused = run_cli("ledger", "--ledger", str(ledger), "delete from events")
        assert refused.returncode != 0 and "read-only" in refused.stderr
        assert run_cli("receipt", "--ledger", str(ledger), "--json").returncode == 0
        # the market's bill against the ledger, read through the controller that holds it
        # (it said the file was locked); a campaign in flight may differ by what is billing now
        rec = run_cli(
            "reconcile", "--ledger", str(ledger), "--market-url", sim.url, "--json",
            env=headless_env(sim),
        )  # fmt: skip
        assert rec.returncode in (0, 1), rec.stderr
        assert json.loads(rec.stdout)["instances"] > 0

        out.wait_for("verify ")
        client = ControllerClient(Target(socket=sock))
        # the market's API key never leaves the controller
        raw = httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://x")
        answers = [raw.get(p).text for p in ("/v1/status", "/v1/snapshot", "/v1/receipt")]
        raw.close()
        assert sim.api_key and not any(sim.api_key in a for a in answers)
        # a verified one: the engine may itself destroy a host still booting that turns out dead
        held = [i for i in client.snapshot().instances if i.ended_at is None and i.passed_preflight]
        assert held
        victim = held[0].instance_id
        with pytest.raises(api.ServiceError, match="does not name it"):
            client.intent(DestroyIntent(DestroyConfirmation(victim, str(victim + 1))))
        with pytest.raises(api.ServiceError, match="not held"):
            client.intent(StopIntent(1))
        truth = sim.call(sim.market.truth)["instances"]
        assert [r["destroyed_at"] for r in truth if r["id"] == victim] == [None], (
            "a refused destroy destroyed"
        )

        # ten attaches and detaches, then two dashboards at once: each sees the same fleet
        for _ in range(10):
            engine = RemoteEngine(Target(socket=sock))
            got: list = []
            engine.on_snapshot = got.append
            engine.start()
            _until(lambda got=got: got, 120, "a snapshot")
            assert got[0].campaign == "svc" and got[0].decisions, "no history on re-attach"
            engine.shutdown("detach")
        pair = [RemoteEngine(Target(socket=sock)) for _ in range(2)]
        seen: list[list] = [[], []]
        for e, s in zip(pair, seen, strict=True):
            e.on_snapshot = s.append
            e.start()
        _until(lambda: all(seen), 120, "both dashboards fed")
        ids = [{i.instance_id for i in s[-1].instances} for s in seen]
        assert ids[0] & ids[1]
        for e in pair:
            e.shutdown("detach")
        assert proc.poll() is None, "a dashboard's detach ended the controller"

        _dashboard_stops_one_and_detaches(sim, sock)
        assert proc.poll() is None, "the dashboard's detach ended the controller"

        # the ledger screen's surface, remote: a query, a refusal, a receipt
        remote = ControllerClient(Target(socket=sock), timeout=600.0)
        assert remote.query("select 1 as one").rows == [(1,)]
        assert remote.receipt("svc")[0]["campaign"] == "svc"
        with pytest.raises(QueryRefused):
            remote.query("insert into quarantine values (1, 'x', null)")
        # pages: more rows than one page holds arrive whole, in order
        many = remote.query("select i from range(25000) t(i)", limit=25000)
        assert len(many.rows) == 25000 and many.rows[-1] == (24999,) and not many.truncated
        assert remote.query("select i from range(25000) t(i)", limit=12000).truncated
        # a runaway query is cancelled, and the controller goes on
        failed: list[Exception] = []

        def runaway() -> None:
            try:
                remote.query("select sum(i * i) from range(100000000000) t(i)")
            except Exception as exc:
                failed.append(exc)

        t = threading.Thread(target=runaway)
        t.start()
        _until(lambda: remote._running is not None, 120, "the query running")
        time.sleep(0.3)
        remote.interrupt()
        t.join(60)  # a ceiling on a hang only: uninterrupted, the sum runs for hours
        assert not t.is_alive()
        assert failed and isinstance(failed[0], QueryFailed), failed
        # a client that hangs up mid-query stops it too
        impatient = ControllerClient(Target(socket=sock), timeout=1.0)
        with pytest.raises(api.ControllerGone):
            impatient.query("select sum(i * i) from range(100000000000) t(i)")
        impatient.close()
        _until(lambda: not client.status()["queries"], 120, "the hung-up query ended")
        assert remote.query("select 2 as two").rows == [(2,)]
        remote.close()
        client.close()

        gate.touch()
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    text = out.text()
    assert proc.returncode == 0, text[-3000:]
    assert _live(sim) == set(), "the campaign's end left something running"
    assert json.loads(run_cli("ls", "--json").stdout) == []
    assert not Path(sock).exists()
    _assert_ledger_is_the_truth(sim, ledger)
    # the same query from the file, now that no controller holds it: the same output
    for fmt in FORMATS:
        direct = run_cli("ledger", "--ledger", str(ledger), *fmt, stable)
        assert direct.returncode == 0 and through[fmt].returncode == 0
        assert through[fmt].stdout == direct.stdout, fmt


FORMATS = [(), ("--json",), ("--csv",)]


def test_an_attached_dashboard_sees_the_campaigns_end(make_sim, tmp_path, runtime):
    # the release at the campaign's end happens after its last poll: a dashboard still
    # attached is shown that final state (every instance ended), not the fleet still running.
    # The jobs end only once the dashboard watches (the gate), and the test waits for the
    # goodbye that follows the final snapshot, never for a wall time, which a loaded box's
    # reader thread can outlast.
    sim = make_sim(seed=7, offers=60, time_scale=240)
    gate = tmp_path / "gate"
    proc = _start(sim, tmp_path, tmp_path / "l.duckdb", job_s=0, gate=gate)
    out = Reader(proc)
    try:
        sock = _socket_of(out.wait_for("controller API on unix:"))
        engine = RemoteEngine(Target(socket=sock))
        got: list = []
        engine.on_snapshot = got.append
        engine.start()
        _until(lambda: got, 120, "a snapshot")
        gate.touch()  # the jobs end once the dashboard watches: the campaign ends
        proc.wait(timeout=240)
        _until(lambda: engine.ended is not None, 120, "the controller's goodbye")
        engine.shutdown("detach")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    assert proc.returncode == 0, out.text()[-3000:]
    last = got[-1]
    assert last.instances and all(i.ended_at is not None for i in last.instances), [
        (i.instance_id, i.phase) for i in last.instances
    ]


def _dashboard_stops_one_and_detaches(sim, sock: str) -> None:
    """The real dashboard, attached: the operator's stop reaches the market, a second
    dashboard sees it, and the detach key leaves the controller running."""
    from rentwatch.widgets.app import RentwatchApp
    from rentwatch.widgets.fleet import FleetView

    target = Target(socket=sock)
    app = RentwatchApp(RemoteEngine(target), ControllerClient(target, timeout=600.0), refresh_s=0.1)
    other = RemoteEngine(target)
    watched: list = []
    other.on_snapshot = watched.append
    other.start()

    async def until(pilot, cond, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            await pilot.pause(0.1)
        raise AssertionError("condition never met")

    async def drive() -> None:
        async with app.run_test(size=(150, 45)) as pilot:
            view = app.query_one(FleetView)
            await until(pilot, lambda: any(s.ended_at is None for s in view.snaps))
            view.cursor = next(i for i, s in enumerate(view.snaps) if s.ended_at is None)
            victim = view.selected_id
            await pilot.press("s")
            await pilot.pause(0.3)
            if getattr(app.screen, "purpose", None) == "stop":  # it asks first: answer Stop
                await pilot.click("#stop")
            await until(pilot, lambda: victim not in _live(sim))

            def seen_stopped() -> bool:
                snap = watched[-1] if watched else None
                row = (
                    next((i for i in snap.instances if i.instance_id == victim), None)
                    if snap
                    else None
                )
                return row is not None and row.ended_at is not None

            await until(pilot, seen_stopped)  # the other dashboard saw this one's action
            await pilot.press("x")  # asks first, with Leave running focused
            await until(pilot, lambda: len(app.screen_stack) > 1)
            await pilot.press("enter")
            await until(pilot, lambda: not app.is_running, timeout=30)

    try:
        asyncio.run(drive())
    finally:
        other.shutdown("detach")
    assert app.return_value == "leave"


def test_controller_killed_then_restarted_while_attached(make_sim, tmp_path, runtime):
    sim = make_sim(seed=7, offers=60, time_scale=240)
    ledger = tmp_path / "l.duckdb"
    proc = _start(sim, tmp_path, ledger, job_s=600)
    out = Reader(proc)
    sock = _socket_of(out.wait_for("controller API on unix:"))
    engine = RemoteEngine(Target(socket=sock))
    snaps: list = []
    errors: list[str] = []
    engine.on_snapshot = snaps.append
    engine.on_error = errors.append
    engine.start()
    restarted = None
    try:
        out.wait_for("verify ")
        _until(lambda: snaps, 120, "a snapshot")
        proc.kill()
        proc.wait()
        held = _live(sim)
        assert held, "the killed controller held nothing"
        _until(lambda: any("lost the controller" in e for e in errors), 120, "the loss said")
        assert json.loads(run_cli("ls", "--json").stdout) == []  # the dead one is swept
        assert Path(sock).exists()  # kill -9 left its socket behind: the restart must cope

        restarted = _start(sim, tmp_path, ledger, job_s=600)
        out2 = Reader(restarted)
        assert _socket_of(out2.wait_for("controller API on unix:")) == sock
        out2.wait_for("adopt")
        _until(lambda: any("reconnected" in e for e in errors), 120, "the reconnection said")
        before = len(snaps)
        _until(lambda: len(snaps) > before, 120, "snapshots from the restarted controller")
        assert held <= {i.instance_id for i in snaps[-1].instances}

        client = ControllerClient(Target(socket=sock))
        assert client.intent(FleetSizeIntent(1)).message == "fleet size 2 -> 1"
        snap = client.snapshot()
        assert snap.fleet == 1 and any("fleet  2 -> 1 by human" in d for d in snap.decisions)
        assert "leave the fleet running" in client.shutdown("detach")
        client.close()
        restarted.wait(timeout=60)
        assert restarted.returncode == 0, out2.text()[-3000:]
        led = Ledger(ledger, read_only=True)
        detached = {e.instance_id for e in led.events(where="kind = 'detached'")}
        led.close()
        assert detached
        # a detach leaves the fleet unsupervised but for its host watchdogs (docs/service.md):
        # one may stop its own rental once no heartbeat came for its window, which a loaded
        # box's slow exit can reach; nothing else may stop a detached rental
        for iid in detached - _live(sim):
            log = _watchdog_log(sim, iid)
            said = log.read_text() if log.exists() else ""
            assert "heartbeat silent" in said, f"detach stopped {iid}, which it should leave"
    finally:
        engine.shutdown("detach")
        for p in (proc, restarted):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)


def test_only_the_adapter_touches_the_engine():
    """`controller.py` is the one module of app/run/service that may import the engine, so a
    refactor of the engine changes one file here."""
    import ast

    engine = ("engine", "market", "run.host", "run.engine_thread")
    offenders = []
    service = Path(__file__).resolve().parent.parent / "app" / "run" / "service"
    for path in service.glob("*.py"):
        if path.name == "controller.py":
            continue
        for node in ast.walk(parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level < 2:
                continue
            # app/run/service: level 2 is app/run, level 3 is app
            target = ("run." if node.level == 2 else "") + (node.module or "")
            # the intents are the wire's vocabulary, not the engine's workings
            if node.level <= 3 and target.startswith(engine) and target != "engine.intents":
                offenders.append(f"{path.name}: {'.' * node.level}{node.module}")
    assert not offenders, offenders


def _inst(iid: int, **kw) -> InstanceSnap:
    base = dict(
        instance_id=iid,
        gpu_name="RTX 4090 \u2014 \x1b]52;c;x\x07",  # host text travels as data, unchanged
        machine_id=None,
        host_id=7,
        dph=0.31,
        phase="verified",
        status=None,
        status_msg="",
        status_age_s=1.5,
        freeze_window_s=None,
        util=None,
        util_history=(1.0, 2.5),
        sm_clock=None,
        max_sm_clock=2520.0,
        throttle="",
        billed_usd=0.1,
        verdict="",
        created_at=1e9,
        ended_at=None,
        failure_class=None,
        passed_preflight=True,
    )
    base.update(kw)
    return InstanceSnap(**base)


def test_a_snapshot_crosses_the_wire_unchanged():
    snap = FleetReadout(
        now=1e9,
        campaign="c",
        policy="default",
        fleet=2,
        creates=3,
        max_creates=9,
        instances=(_inst(1), _inst(2, ended_at=1e9 + 5, phase="stopped", job="j: step 3")),
        quarantined=1,
        duds=1,
        dud_usd=0.02,
        spent_usd=0.5,
        verified=1,
        gpu_hours=0.25,
        decisions=("create i:1", "verify i:1"),
        decisions_total=40,
        finished=None,
    )
    wire = json.loads(json.dumps(api.snap_to_json(snap)))
    assert api.snap_from_json(wire) == snap
    assert api.snap_from_json(wire).dud_share == snap.dud_share


def test_status_rate_is_the_dashboards_rate_now(tmp_path):
    """`rentwatch ls`'s $/h is the bar's "$/h now": a fleet of stopped rentals bills storage
    (it said $0.000 over four of them), and a booting one's GPU does not bill yet."""
    ctl = Controller("c", tmp_path / "l.duckdb")
    ctl._sup = object()  # type: ignore[assignment]
    ctl.running_queries = list  # type: ignore[method-assign]
    ctl.snapshot = lambda: {  # type: ignore[method-assign]
        "policy": "default",
        "fleet": 2,
        "verified": 1,
        "in_service": 0,
        "spent_usd": 0.5,
        "finished": None,
        "dph_now": 0.032,
        "observed": 1,
        "instances": [
            {"ended_at": 1e9 + 5, "phase": "stopped", "dph": 0.31},
            {"ended_at": None, "phase": "observed", "dph": 0.2, "supervised": False},
        ],
    }
    status = ctl.status()
    assert status["dph"] == 0.032 and status["held"] == 0 and status["in_service"] == 0
    assert status["observed"] == 1  # shown apart: quitting does not act on it
    assert status["stopped"] == 1  # not live, but billing storage


@pytest.mark.parametrize(
    "body, intent",
    [
        ({"intent": "stop", "instance_id": 5}, StopIntent(5)),
        ({"intent": "start", "instance_id": 5}, StartIntent(5)),
        (
            {"intent": "destroy", "instance_id": 5, "typed": " 5 "},
            DestroyIntent(DestroyConfirmation(5, " 5 ")),
        ),
        ({"intent": "create"}, CreateIntent()),
        ({"intent": "fleet", "size": 0}, FleetSizeIntent(0)),
    ],
)
def test_intents_round_trip(body, intent):
    assert api.intent_from_json(body) == intent
    assert api.intent_from_json(api.intent_to_json(intent)) == intent


@pytest.mark.parametrize(
    "body, says",
    [
        ({"intent": "destroy", "instance_id": 5}, "typed"),
        ({"intent": "stop", "instance_id": True}, "instance_id"),
        ({"intent": "stop", "instance_id": -1}, "between"),
        ({"intent": "fleet", "size": 100000}, "between"),
        ({"intent": "create", "instance_id": 3}, "unknown fields"),
        ({}, "unknown intent"),
        ("stop", "JSON object"),
    ],
)
def test_bad_intents_say_what_is_wrong(body, says):
    with pytest.raises(api.BadRequest, match=says):
        api.intent_from_json(body)


def test_watch_dashboard_goes_through_the_socket(make_sim, tmp_path, runtime):
    """`watch`/`demo` serve their own engine and attach to it like any dashboard: `ls` lists
    the session, `ledger` answers while it holds the file, and Stop all still releases all."""
    from rentwatch.core.policy import get_policy
    from rentwatch.market.factory import load_campaign
    from rentwatch.run.dashboard import attach_in_process, make_engine

    sim = make_sim(seed=7, offers=40, time_scale=120)
    path = tmp_path / "l.duckdb"
    engine = make_engine(
        sim.url,
        sim.api_key,
        load_campaign(campaign_text("tui", 2)),
        get_policy("default"),
        path,
        tmp_path / "key",
    )
    app, finish = attach_in_process(engine)
    assert isinstance(app.engine, RemoteEngine), "the dashboard drives the engine directly"

    async def drive() -> None:
        async with app.run_test(size=(150, 45)) as pilot:
            deadline = time.monotonic() + 60
            while not (app.latest and any(s.ended_at is None for s in app.latest.instances)):
                assert time.monotonic() < deadline, "no instance on the dashboard"
                await pilot.pause(0.2)
            listed = json.loads(run_cli("ls", "--json").stdout)
            assert [r["campaign"] for r in listed] == ["tui"]
            q = await asyncio.to_thread(
                run_cli, "ledger", "--ledger", str(path), "--json", "select count(*) n from events"
            )
            assert q.returncode == 0 and json.loads(q.stdout)[0]["n"] > 0, q.stderr
            await pilot.press("q")
            while len(app.screen_stack) == 1:
                await pilot.pause(0.1)
            await pilot.press("enter")  # Stop all and quit (the default button)
            deadline = time.monotonic() + 60
            while app.is_running:
                assert time.monotonic() < deadline, "the dashboard never quit"
                await pilot.pause(0.2)

    try:
        asyncio.run(drive())
    finally:
        finish(app.return_value)
    assert app.return_value == "stop"
    assert not engine._thread.is_alive()
    assert _live(sim) == set(), "Stop all left something running"
    assert json.loads(run_cli("ls", "--json").stdout) == []


def test_run_in_the_background_outlives_its_terminal(make_sim, tmp_path, runtime):
    """`run --background` returns once the controller serves; the controller runs on in its
    own session until asked to stop, and then releases what it holds."""
    from rentwatch.run.service.registry import pid_alive

    sim = make_sim(seed=7, offers=60, time_scale=240)
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("bg", 1, JOBS.format(run="sleep 600", timeout_min=360)))
    ledger = tmp_path / "l.duckdb"
    out = subprocess.run(
        [
            *headless_cmd(sim, tmp_path, camp, ledger)[:4],
            "--background",
            *headless_cmd(sim, tmp_path, camp, ledger)[5:],
        ],
        capture_output=True,
        text=True,
        env=headless_env(sim),
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    assert "started  bg" in out.stdout
    [entry] = json.loads(run_cli("ls", "--json").stdout)
    pid = entry["pid"]
    try:
        assert entry["campaign"] == "bg" and os.getsid(pid) == pid  # its own session
        log = Path(str(ledger) + ".log")
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        client = ControllerClient(Target(socket=entry["socket"]))
        _until(lambda: any(i.passed_preflight for i in client.snapshot().instances), 90, "verify")
        assert _live(sim)
        client.shutdown("stop")
        client.close()
        _until(lambda: not pid_alive(pid), 60, "the controller's exit")
        assert _live(sim) == set(), log.read_text()[-2000:]
        assert "exits with code 0" in " ".join(
            e.reason for e in Ledger(ledger, read_only=True).events(where="kind = 'campaign_end'")
        )
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGTERM)


def test_a_reply_crosses_the_socket_field_for_field():
    from rentwatch.engine.intents import Reply

    reply = Reply(True, "a; b", (1, 2), (2,), lines=("stopped verified i:1", "destroyed i:2"))
    assert api.reply_from_json(json.loads(json.dumps(api.reply_to_json(reply)))) == reply
    refusal = Reply.refusal("instance 9 is not held by this campaign", not_held=True)
    assert api.reply_from_json(api.reply_to_json(refusal)) == refusal
    with pytest.raises(api.ServiceError, match="not one"):
        api.reply_from_json({"done": True})
