"""`rentwatch end`: a campaign ended with nothing of it left billing. Directly against the
market when no controller runs, through the controller's `end` intent when one does; with
`--destroy` verified rentals go too, as the person's act (actor `human`), after the campaign's
name is typed; a controller whose campaign has ended still takes stop, start and destroy."""

from __future__ import annotations

import asyncio
import functools
import io
import subprocess
import time

import pytest
from rentwatch.cli.end import holdings
from rentwatch.cli.main import main
from rentwatch.core.policy import get_policy
from rentwatch.engine.intents import (
    CreateIntent,
    DestroyConfirmation,
    DestroyIntent,
    EndIntent,
    FleetSizeIntent,
    StartIntent,
    StopIntent,
)
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign
from rentwatch.referee.stepped import run_stepped
from rentwatch.run.host import run_headless
from rentwatch.run.service import api
from rentwatch.run.service.remote import ControllerClient
from rentwatch.run.service.target import Target

from tests.campaigns import campaign_text, headless_cmd, headless_env
from tests.source_ast import parse
from tests.test_service import Reader, _socket_of

# image pulls of 1-3 market minutes, not the default 6-16: the boots these tests wait through
# are seconds of wall time, and none of them is about a boot
HEALTHY = [{"behaviour": "healthy", "share": 1.0, "pull_min": [1, 3]}]
JOB = """
[[jobs]]
name = "long"
run = "sleep 600"
artifacts = ["out/"]
"""


def _billing(sim, ids: set[int]) -> dict[int, str]:
    """The campaign's rentals the market still bills (not destroyed), with their status."""
    t = sim.call(sim.market.truth)
    return {
        r["id"]: r["actual_status"]
        for r in t["instances"]
        if r["id"] in ids and r["destroyed_at"] is None
    }


def _detached(sim, tmp_path, name: str, extra: str = ""):
    """The campaign run to its fleet and detached; on a stepped simulator, on its clock."""
    ledger = tmp_path / "l.duckdb"
    campaign = load_campaign(campaign_text(name, 2, extra))
    clock = sim.market.clock if sim.stepped else None
    main = run_headless(
        campaign, get_policy("default"), sim.url, sim.api_key, str(ledger),
        detach=True, key_path=str(tmp_path / "key"), market_clock=clock,
    )  # fmt: skip
    code = run_stepped(sim, main) if sim.stepped else asyncio.run(main)
    assert code == 0
    with Ledger(ledger, read_only=True) as led:
        ids = {r["instance_id"] for r in led.instance_rows()}
    return ledger, ids


def _actors(ledger, kind: str) -> dict[int, str]:
    with Ledger(ledger, read_only=True) as led:
        evs = led.events(where=f"kind = '{kind}' AND phase = 'outcome' AND ok")
    return {e.instance_id: e.actor for e in evs}


def test_direct_end_stops_then_destroy_ends_everything(make_sim, tmp_path, capsys, monkeypatch):
    sim = make_sim(seed=4, offers=20, time_scale=120, host_class=HEALTHY)
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    ledger, ids = _detached(sim, tmp_path, "endd")
    capsys.readouterr()
    held = holdings(ledger, "endd")
    verified = {h.instance_id for h in held if h.verified}
    assert verified and all(not h.stopped for h in held)
    base = ["end", "--campaign", "endd", "--ledger", str(ledger), "--market-url", sim.url]

    # a wrong name typed: the listing, then nothing done
    monkeypatch.setattr("sys.stdin", io.StringIO("endx\n"))
    assert main([*base, "--destroy"]) == 2
    out = capsys.readouterr()
    assert "endd holds" in out.out and "would DESTROY all of them" in out.out
    assert "VERIFIED" in out.out and "/day" in out.out and "nothing done" in out.err
    assert set(_billing(sim, ids)) >= verified

    # end (no destroy): verified ones stopped, storage still bills: exit 1 and the way out
    assert main([*base, "--yes", "endd"]) == 1
    out = capsys.readouterr().out
    assert "left billing" in out and "--destroy" in out
    # [AC 7] the hint works as printed: it names the campaign's market (not Vast's own)
    hint = next(line for line in out.splitlines() if line.startswith("end them: "))
    assert f"--market-url {sim.url}" in hint and f"--ledger {ledger}" in hint
    assert set(_billing(sim, ids).values()) == {"stopped"}
    # each stop the person's, or found already made by its host's watchdog while nobody
    # watched (the end adopts as a restarted controller does, and says so)
    with Ledger(ledger, read_only=True) as led:
        stops = {(e.instance_id, e.actor) for e in led.events(where="kind = 'stop' AND ok")}
    assert {i for i, _ in stops} == verified
    assert {actor for _, actor in stops} <= {"human", "reconcile"}

    # end --destroy, the name typed at the prompt: nothing left, each destroy the person's
    monkeypatch.setattr("sys.stdin", io.StringIO("endd\n"))
    assert main([*base, "--destroy"]) == 0
    out = capsys.readouterr().out
    assert "type the campaign's name (endd)" in out and "nothing of endd is left billing" in out
    assert _billing(sim, ids) == {}
    destroys = _actors(ledger, "destroy")
    assert verified <= set(destroys) and all(destroys[i] == "human" for i in verified)
    assert holdings(ledger, "endd") == []
    with Ledger(ledger, read_only=True) as led:  # the ledger's bill stopped where the market's did
        assert all(r["destroyed_at"] is not None for r in led.instance_rows())

    # again: nothing to do
    assert main([*base, "--destroy", "--yes", "endd"]) == 0
    assert main(["end", "--campaign", "nope", "--ledger", str(ledger)]) == 2


def test_end_through_a_running_controller(make_sim, tmp_path, capsys):
    sim = make_sim(seed=4, offers=20, time_scale=120, host_class=HEALTHY)
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("endc", 2, JOB))
    ledger = tmp_path / "l.duckdb"
    proc = subprocess.Popen(
        headless_cmd(sim, tmp_path, camp, ledger),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=headless_env(sim),
    )  # fmt: skip
    out = Reader(proc)
    try:
        sock = _socket_of(out.wait_for("controller API on unix:"))
        out.wait_for("job    long started")
        client = ControllerClient(Target(socket=sock))
        with pytest.raises(api.ServiceError, match="not confirmed"):
            client.intent(EndIntent(destroy=True, typed="endx"))
        client.close()
        held = holdings(ledger, "endc")  # read through the controller that holds the file
        assert any(h.verified and "long (running)" in h.unpulled for h in held)
        code = main(["end", "--campaign", "endc", "--ledger", str(ledger), "--destroy",
                     "--yes", "endc"])  # fmt: skip
        said = capsys.readouterr().out
        assert code == 0, said
        assert "outputs NOT pulled off: long (running)" in said
        assert "controller: destroyed verified" in said
        assert proc.wait(60) == 0  # the headless run ends: nothing left to release
    finally:
        if proc.poll() is None:
            proc.kill()
    with Ledger(ledger, read_only=True) as led:
        ids = {r["instance_id"] for r in led.instance_rows()}
        human = {
            e.instance_id
            for e in led.events(where="kind = 'destroy' AND phase = 'outcome' AND ok")
            if e.actor == "human"
        }
        verified = {r["instance_id"] for r in led.instance_rows() if r["verified_at"]}
    assert verified and verified <= human
    assert _billing(sim, ids) == {}
    assert "the campaign was ended by a person" in out.text()


def test_an_ended_campaigns_controller_still_takes_stop_and_destroy(make_sim, tmp_path):
    """The dashboard's engine (demo, watch): its campaign ends, its controller goes on serving
    the person; what would start, rent or take over anything is refused."""
    from rentwatch.run.engine_thread import EngineThread

    sim = make_sim(seed=4, offers=20, time_scale=240, host_class=HEALTHY)
    campaign = load_campaign(campaign_text("ended", 1))  # no jobs: done once one verifies
    path = str(tmp_path / "l.duckdb")
    engine = EngineThread(
        functools.partial(
            run_headless, campaign, get_policy("default"), sim.url, sim.api_key, path,
            key_path=str(tmp_path / "key"), served=True, log=lambda line: None,
        ),
        max_wall_poll=0.2,
    )  # fmt: skip
    sock = engine.start()
    client = ControllerClient(Target(socket=sock), timeout=120)
    try:
        deadline = time.time() + 90
        while client.status().get("finished") is None:
            assert time.time() < deadline, "the campaign never finished"
            time.sleep(0.2)
        live = [
            i for i in client.snapshot().instances if i.ended_at is None and i.phase == "verified"
        ]
        assert live
        iid = live[0].instance_id
        with pytest.raises(api.ServiceError, match="the campaign has ended"):
            client.intent(CreateIntent())
        with pytest.raises(api.ServiceError, match="the campaign has ended"):
            client.intent(FleetSizeIntent(3))
        assert client.intent(StopIntent(iid)).acted_on == (iid,)
        with pytest.raises(api.ServiceError, match="the campaign has ended"):
            client.intent(StartIntent(iid))  # it would bill with nothing supervising it
        with pytest.raises(api.ServiceError, match="does not name it"):
            client.intent(DestroyIntent(DestroyConfirmation(iid, "nope")))
        assert client.intent(DestroyIntent(DestroyConfirmation(iid, str(iid)))).destroyed == (iid,)
        # then the clean end: everything else it holds destroyed, and it still serves
        done = client.intent(EndIntent(destroy=True, typed="ended"))
        assert done.done and ("destroyed" in done.message or "held nothing" in done.message)
        # read until it settles: the destroy above leaves the done campaign short, and its
        # rules may rent a replacement; one still in flight at the end is ended as it lands
        deadline = time.time() + 60
        while client.status()["held"] and time.time() < deadline:
            time.sleep(0.2)
        assert client.status()["held"] == 0, done
    finally:
        client.close()
        engine.shutdown("stop")
    with Ledger(path) as led:  # the engine's, closed with it
        ids = {r["instance_id"] for r in led.instance_rows()}
        acts = {(e.instance_id, e.kind, e.actor) for e in led.events(where="phase = 'outcome'")}
    assert (iid, "destroy", "human") in acts and (iid, "start", "human") not in acts
    assert _billing(sim, ids) == {}


def test_an_end_refuses_another_market_than_the_campaigns(make_sim, tmp_path, capsys, monkeypatch):
    """A demo's simulated rentals are never sent as destroys to another market (the real
    account, by default): the ledger says which market the campaign rented on. On the
    stepped clock: the market need not move once the campaign detached."""
    sim = make_sim(seed=4, offers=20, stepped=True, host_class=HEALTHY)
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    ledger, ids = _detached(sim, tmp_path, "endm")
    capsys.readouterr()
    before = set(_billing(sim, ids))
    code = main(
        [
            "end",
            "--campaign",
            "endm",
            "--ledger",
            str(ledger),
            "--destroy",
            "--yes",
            "endm",
            "--market-url",
            "http://127.0.0.1:9",
        ]
    )
    assert code != 0 and "rented on" in capsys.readouterr().err
    assert before and set(_billing(sim, ids)) == before  # nothing destroyed
    # [AC 7] refused before the campaign's name is asked for, not after it was typed
    monkeypatch.setattr("sys.stdin", io.StringIO("endm\n"))
    args = ["end", "--campaign", "endm", "--ledger", str(ledger), "--destroy"]
    assert main([*args, "--market-url", "http://127.0.0.1:9"]) != 0
    out = capsys.readouterr()
    assert "rented on" in out.err and "type the campaign's name" not in out.out
    assert set(_billing(sim, ids)) == before


def test_the_cli_writes_no_ledger_event_itself():
    """The engine's journal is the only ledger writer: `rentwatch end` without a controller
    runs the engine on a bare session instead of writing stops and destroys of its own."""
    import ast
    from pathlib import Path

    import rentwatch.cli

    writers = {"record", "outcome", "add_samples"}
    found = []
    for path in Path(rentwatch.cli.__file__).parent.rglob("*.py"):
        for node in ast.walk(parse(path.read_text())):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if call and node.func.attr in writers:
                found.append(f"{path.name}:{node.lineno} .{node.func.attr}(")
    assert found == []
