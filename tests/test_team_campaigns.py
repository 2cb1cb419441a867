"""Two controllers, separate ledgers, one team store, one simulated market: the second rents
none of the machines the first found dead, and the store killed with -9 during the first
campaign loses and duplicates nothing."""

from __future__ import annotations

import threading
import time

import psycopg
from rentwatch.core.policy import get_policy
from rentwatch.ledger import Ledger
from rentwatch.ledger.team.config import TeamConfig
from rentwatch.ledger.team.store import TeamStore
from rentwatch.market.factory import load_campaign
from rentwatch.referee.stepped import run_stepped
from rentwatch.run.host import run_headless

from .campaigns import campaign_text
from .team_pg import PgServer

# cheap machines that die in the pull, dearer healthy ones: by price alone, every newcomer
# rents the duds first
MARKET = [
    {"behaviour": "fatal_pull", "share": 0.5, "gpu": ["RTX 3090"], "dph": [0.05, 0.09]},
    {"behaviour": "healthy", "share": 0.5, "gpu": ["RTX 3090"], "dph": [0.20, 0.40]},
]


def _run(sim, tmp_path, name: str, team: TeamConfig) -> int:
    """A campaign on the simulator's stepped clock: market time moves only while the engine
    waits, so a loaded box judges no healthy host dead (the store's sync is real I/O)."""
    campaign = load_campaign(campaign_text(name, fleet=1, max_creates=20))
    main = run_headless(
        campaign,
        get_policy("default").with_overrides(campaign.policy),
        sim.url,
        sim.api_key,
        str(tmp_path / f"{name}.duckdb"),
        key_path=str(tmp_path / "key"),
        team=team,
        market_clock=sim.market.clock,
    )
    return run_stepped(sim, main)


def _kill_once_shipping(server: PgServer, url: str, sim) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(url, password=server.password) as c:
                row = c.execute("SELECT count(*) FROM rentwatch.events").fetchone()
            if row and row[0]:
                break
        except psycopg.Error:
            pass
        time.sleep(0.1)
    # the market stands while the store is down (the engine goes on, market time does not):
    # on the stepped clock a campaign is a few wall seconds, and it must still be running
    # when the store comes back, as a real one would be
    with sim.market.clock.held():
        server.kill9()
        time.sleep(3.0)
        server.start()


def _created(path) -> list[int]:
    with Ledger(path, read_only=True) as ledger:
        rows = ledger.query(
            "SELECT machine_id FROM events WHERE kind = 'create' AND phase = 'outcome' AND ok"
        ).rows
    return [int(r[0]) for r in rows]


def _quarantined(path) -> set[int]:
    with Ledger(path, read_only=True) as ledger:
        rows = ledger.query("SELECT machine_id FROM quarantine").rows
    return {int(r[0]) for r in rows}


def test_the_second_controller_rents_none_of_the_machines_the_first_found_dead(
    make_sim,
    capsys,
    pg_server: PgServer,
    team_db: str,
    tmp_path,
    monkeypatch,
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    owner = TeamStore(TeamConfig(pg_server.url(db=team_db), "owner"))
    owner.init()
    owner.close()
    sim = make_sim(seed=11, offers=12, stepped=True, host_class=MARKET)
    url = pg_server.url(db=team_db)  # the owner's login, for brevity: roles are tested elsewhere
    # the server killed with -9 once the first campaign's sync has shipped, and started again
    # 3 s later, while the campaign runs
    fault = threading.Thread(target=_kill_once_shipping, args=(pg_server, url, sim))
    fault.start()
    try:
        assert _run(sim, tmp_path, "alice-1", TeamConfig(url, "alice")) == 0
    finally:
        fault.join()
    out = capsys.readouterr().out
    assert "the campaign goes on" in out  # it noticed, and went on
    dead = _quarantined(tmp_path / "alice-1.duckdb")
    assert dead, "the first controller found no dead machine: the test proves nothing"
    assert _run(sim, tmp_path, "bob-1", TeamConfig(url, "bob")) == 0
    bob = _created(tmp_path / "bob-1.duckdb")
    assert bob and not set(bob) & dead, (bob, dead)
    # each ledger's events are in the store, once, and bob's ledger never wrote a quarantine
    # on alice's word
    assert _quarantined(tmp_path / "bob-1.duckdb").isdisjoint(dead)
    with psycopg.connect(url, password=pg_server.password) as c:
        stored = dict(
            c.execute("SELECT operator, count(*) FROM rentwatch.events GROUP BY 1").fetchall()
        )
    for who in ("alice", "bob"):
        with Ledger(tmp_path / f"{who}-1.duckdb", read_only=True) as ledger:
            assert stored[who] == ledger.query("SELECT count(*) FROM events").rows[0][0]


def test_the_controller_of_watch_and_demo_joins_the_team_and_says_when_it_ends(
    pg_server: PgServer, team_db: str, tmp_path, monkeypatch
):
    """`rentwatch controller --demo --team URL` (what `rentwatch demo --team URL` starts): it
    is live in `ls --team` while it serves, ships as it goes, and its end (a SIGTERM) is in
    the store with a last heartbeat that takes it off the list."""
    import json
    import os
    import signal
    import subprocess
    import sys

    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    url = pg_server.url(db=team_db)
    owner = TeamStore(TeamConfig(url, "owner"))
    owner.init()
    owner.close()
    ledger = tmp_path / "demo.duckdb"
    cmd = [
        sys.executable,
        "-m",
        "rentwatch",
        "controller",
        "--demo",
        "--time-scale",
        "60",
        "--ledger",
        str(ledger),
        "--ssh-key",
        str(tmp_path / "key"),
        "--team",
        url,
        "--operator",
        "dora",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ)
    )

    def live() -> list[dict]:
        out = subprocess.run(
            [sys.executable, "-m", "rentwatch", "ls", "--team", "--team-url", url, "--json"],
            capture_output=True,
            text=True,
            env=dict(os.environ),
            timeout=60,
        )
        return json.loads(out.stdout) if out.returncode == 0 else []

    try:
        deadline = time.monotonic() + 120
        seen: list[dict] = []
        while time.monotonic() < deadline and not seen:
            seen = live()
            time.sleep(0.5)
        assert [(c["operator"], c["pid"]) for c in seen] == [("dora", proc.pid)]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "team   shipping to" in out and pg_server.password not in out
    assert live() == []
    with psycopg.connect(url, password=pg_server.password) as c:
        stored = c.execute(
            "SELECT count(*), count(*) FILTER (WHERE kind = 'campaign_end') FROM rentwatch.events "
            "WHERE operator = 'dora'"
        ).fetchone()
    with Ledger(ledger, read_only=True) as lg:
        here = lg.query("SELECT count(*) FROM events").rows[0][0]
    assert stored == (here, 1)
