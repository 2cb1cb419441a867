"""The team store against a real PostgreSQL server (tests/team_pg.py): the schema and its
roles, each ledger's events shipped once and in order, the hash chain that names an edited or
missing event, and a server that goes away mid-campaign."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest
from rentwatch.ledger import Ledger
from rentwatch.ledger.team.config import TeamConfig
from rentwatch.ledger.team.replica import SEQ_SPAN
from rentwatch.ledger.team.store import StoreRefused, TeamStore
from rentwatch.ledger.team.sync import TeamSync

from .team_pg import PgServer

MARKET = "http://127.0.0.1:9/market"


@pytest.fixture
def store_env(pg_server: PgServer, team_db: str, monkeypatch: pytest.MonkeyPatch):
    """A store made by its owner, and two controllers' login roles granted the controller
    role; PGPASSWORD is the one password of every role here."""
    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    for user in ("alice", "bob"):
        pg_server.admin(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{user}') THEN "
            f"CREATE ROLE {user} LOGIN PASSWORD '{pg_server.password}'; END IF; END $$"
        )
    owner = TeamStore(TeamConfig(pg_server.url(db=team_db), "owner"))
    assert owner.init(grant=["alice", "bob"]) == [1]
    assert owner.init() == []  # again: nothing to apply
    owner.close()
    return pg_server, team_db


def _conf(server: PgServer, db: str, user: str) -> TeamConfig:
    return TeamConfig(server.url(user, db), user)


def _campaign(ledger: Ledger, name: str, market: str = MARKET, at: float = 100.0) -> None:
    ledger.record(
        "campaign_start",
        at=at,
        actor="engine",
        reason="start",
        campaign=name,
        detail={"market": market, "policy": "default"},
    )


def _dud(ledger: Ledger, name: str, iid: int, machine: int, at: float, until: float | None) -> None:
    """A rental that never computed, abandoned and its machine quarantined."""
    seq = ledger.intent(
        "create",
        at=at,
        actor="rule:create",
        reason="c",
        campaign=name,
        instance_id=iid,
        machine_id=machine,
        gpu_name="RTX 3090",
        gpu_dph=0.2,
        storage_dph=0.01,
    )
    ledger.outcome(seq, at=at + 1, ok=True, detail={"gpu_billing": "running"})
    ledger.record(
        "abandon",
        at=at + 300,
        actor="rule:freeze",
        reason="frozen pull",
        campaign=name,
        instance_id=iid,
        machine_id=machine,
        detail={"class": "freeze"},
    )
    ledger.record(
        "quarantine",
        at=at + 300,
        actor="rule:freeze",
        reason="frozen pull",
        campaign=name,
        instance_id=iid,
        machine_id=machine,
        detail={"until": until, "class": "freeze", "scope": "ledger"},
    )
    d = ledger.intent(
        "destroy",
        at=at + 301,
        actor="rule:freeze",
        reason="d",
        campaign=name,
        instance_id=iid,
        machine_id=machine,
    )
    ledger.outcome(d, at=at + 302, ok=True)


def _store_rows(server: PgServer, db: str) -> list[tuple]:
    with psycopg.connect(server.url(db=db), password=server.password) as c:
        return c.execute(
            "SELECT ledger_id, seq, kind FROM rentwatch.events ORDER BY ledger_id, seq"
        ).fetchall()


def test_a_controller_role_may_insert_and_select_never_update_or_delete(store_env, tmp_path):
    server, db = store_env
    with Ledger(tmp_path / "a.duckdb") as ledger:
        _campaign(ledger, "c1")
        sync = TeamSync(ledger, _conf(server, db, "alice"), MARKET, "c1")
        assert sync.round()
        assert sync.shipped == 1
    with psycopg.connect(server.url("alice", db)) as c:
        assert c.execute("SELECT count(*) FROM rentwatch.events").fetchone() == (1,)
        for stmt in (
            "UPDATE rentwatch.events SET reason = 'x'",
            "DELETE FROM rentwatch.events",
            "TRUNCATE rentwatch.events",
            "UPDATE rentwatch.heartbeats SET ended = true",
            "DELETE FROM rentwatch.ledgers",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(stmt)
            c.rollback()


def test_events_ship_once_in_order_and_the_chain_names_an_edit_and_a_loss(store_env, tmp_path):
    server, db = store_env
    with Ledger(tmp_path / "a.duckdb") as ledger:
        _campaign(ledger, "c1")
        _dud(ledger, "c1", 11, 77, 200.0, None)
        sync = TeamSync(ledger, _conf(server, db, "alice"), MARKET, "c1")
        assert sync.round() and sync.round()  # the second round ships nothing again
        local = ledger.raw_events(0, 1000)
        sync.head = None  # as after a restart: the store's head is asked again
        assert sync.round()
    rows = _store_rows(server, db)
    assert [r[1] for r in rows] == [r[0] for r in local] == list(range(1, len(local) + 1))
    owner = TeamStore(TeamConfig(server.url(db=db), "owner"))
    assert owner.check_chains()[2] == []
    # the owner edits one event's reason: that event, and only it, is named
    server.admin("UPDATE rentwatch.events SET reason = 'fine host' WHERE seq = 4", db=db)
    found = owner.check_chains()[2]
    assert [(f.seq, f.problem) for f in found] == [(4, "edited")]
    # and drops the last one: the heartbeat said it was shipped
    server.admin(f"DELETE FROM rentwatch.events WHERE seq = {len(local)}", db=db)
    found = owner.check_chains()[2]
    assert (len(local), "missing") in [(f.seq, f.problem) for f in found]
    owner.close()


def test_the_store_refuses_an_event_that_does_not_follow_its_ledger(store_env, tmp_path):
    server, db = store_env
    with Ledger(tmp_path / "a.duckdb") as ledger:
        _campaign(ledger, "c1")
        sync = TeamSync(ledger, _conf(server, db, "alice"), MARKET, "c1")
        assert sync.round()
        store = TeamStore(_conf(server, db, "alice"))
        row = ledger.raw_events(0, 1)[0]
        forged = (3, *row[1:])  # a gap: no event 2
        with pytest.raises(StoreRefused, match="no event before it"):
            store.ship(sync.ledger_id, "alice", [(forged, "0" * 64, "f" * 64)])
        store.close()


def test_a_store_down_mid_campaign_loses_nothing_and_duplicates_nothing(store_env, tmp_path):
    server, db = store_env
    lines: list[str] = []
    with Ledger(tmp_path / "a.duckdb") as ledger:
        _campaign(ledger, "c1")
        sync = TeamSync(ledger, _conf(server, db, "alice"), MARKET, "c1", log=lines.append)
        assert sync.round()
        server.stop()
        try:
            _dud(ledger, "c1", 12, 78, 400.0, None)  # the campaign goes on, on its ledger
            assert not sync.round()
            assert any("the campaign goes on" in line for line in lines)
            assert server.password not in "\n".join(lines)
        finally:
            server.start()
        _dud(ledger, "c1", 13, 79, 900.0, None)
        assert sync.round()
        # killed with -9 and started again: the next rounds catch up as well
        server.kill9()
        _dud(ledger, "c1", 14, 80, 1500.0, None)
        assert not sync.round()
        server.start()
        assert sync.round()
        local = [r[0] for r in ledger.raw_events(0, 10_000)]
    assert [r[1] for r in _store_rows(server, db)] == local
    owner = TeamStore(TeamConfig(server.url(db=db), "owner"))
    assert owner.check_chains()[2] == []
    owner.close()


SHIPPER = """
import sys
from rentwatch.ledger import Ledger
from rentwatch.ledger.team.config import TeamConfig
from rentwatch.ledger.team.replica import SEQ_SPAN
from rentwatch.ledger.team import sync as s
s.SHIP_BATCH = 500
ledger = Ledger(sys.argv[1])
t = s.TeamSync(ledger, TeamConfig(sys.argv[2], "alice"), None, "big")
print("shipping", flush=True)
t.round()
print("done", flush=True)
"""


def test_a_controller_killed_mid_ship_loses_and_duplicates_nothing(store_env, tmp_path):
    server, db = store_env
    path = tmp_path / "big.duckdb"
    n = 10_000
    with Ledger(path) as ledger:
        _campaign(ledger, "big")
    import duckdb

    con = duckdb.connect(str(path))  # many events at once (the ledger writes one at a time)
    con.execute(
        "INSERT INTO events (seq, ts, campaign, actor, kind, phase, reason, detail) "
        "SELECT i, i, 'big', 'engine', 'note', 'fact', 'note ' || i, '{}' "
        f"FROM range(2, {n + 1}) t(i)"
    )
    con.close()
    proc = subprocess.Popen(
        [sys.executable, "-c", SHIPPER, str(path), server.url("alice", db)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        deadline = time.monotonic() + 120
        got = 0
        while time.monotonic() < deadline:
            got = len(_store_rows(server, db))
            if got >= 1000 or proc.poll() is not None:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert 0 < got < n, f"the kill came {'before' if not got else 'after'} the ship ({got})"
    with Ledger(path) as ledger:
        sync = TeamSync(ledger, _conf(server, db, "alice"), None, "big")
        assert sync.round()
        local = [r[0] for r in ledger.raw_events(0, n + 10)]
    assert [r[1] for r in _store_rows(server, db)] == local == list(range(1, n + 1))
    owner = TeamStore(TeamConfig(server.url(db=db), "owner"))
    assert owner.check_chains()[2] == []
    owner.close()


def _verified(ledger: Ledger, name: str, iid: int, machine: int, at: float) -> None:
    seq = ledger.intent(
        "create",
        at=at,
        actor="rule:create",
        reason="c",
        campaign=name,
        instance_id=iid,
        machine_id=machine,
        gpu_name="RTX 4090",
        gpu_dph=0.3,
        storage_dph=0.01,
    )
    ledger.outcome(seq, at=at + 1, ok=True, detail={"gpu_billing": "running"})
    ledger.record(
        "status",
        at=at + 60,
        actor="market",
        reason="running",
        campaign=name,
        instance_id=iid,
        machine_id=machine,
        detail={"status": "running"},
    )
    ledger.record(
        "preflight_passed",
        at=at + 90,
        actor="rule:preflight",
        reason="ok",
        campaign=name,
        instance_id=iid,
        machine_id=machine,
    )


def test_a_teammates_duds_and_quarantines_count_against_a_machine_never_for_it(store_env, tmp_path):
    server, db = store_env
    with Ledger(tmp_path / "a.duckdb") as a, Ledger(tmp_path / "b.duckdb") as b:
        _campaign(a, "alice-1")
        _dud(a, "alice-1", 11, 77, 200.0, until=None)
        _dud(a, "alice-1", 12, 78, 300.0, until=500.0)  # lapses at market time 500
        _verified(a, "alice-1", 13, 90, 400.0)  # alice's success says nothing to bob
        _campaign(a, "alice-demo", market="http://127.0.0.1:1/other-market", at=450.0)
        _dud(a, "alice-demo", 21, 91, 460.0, until=None)  # another market's machine 91
        _campaign(b, "bob-1")
        _verified(b, "bob-1", 31, 77, 100.0)  # bob rented machine 77 before and it computed
        sa = TeamSync(a, _conf(server, db, "alice"), MARKET, "alice-1")
        sb = TeamSync(b, _conf(server, db, "bob"), MARKET, "bob-1")
        assert b.teammates_quarantined(0.0) == {}
        assert sa.round() and sb.round()
        assert sb.pulled == len(a.raw_events(0, 1000))
        assert sb.round() and sb.pulled == len(a.raw_events(0, 1000))  # each event once
        assert set(b.teammates_quarantined(400.0)) == {77, 78}
        assert set(b.teammates_quarantined(600.0)) == {77}
        assert b.teammates_quarantined(600.0)[77].startswith("alice: ")
        # the faded delivery record reads the union: alice's duds, never her success, and
        # none of another market's
        rentals = b.team_rentals()
        assert sorted((r.machine_id, r.gpu_name) for r in rentals if r.dud) == [
            (77, "RTX 3090"),
            (78, "RTX 3090"),
        ]
        assert {r.machine_id for r in rentals if not r.dud} == {77}
        assert not any(r.dud for r in b.rentals())  # bob's own ledger is his alone
        # the union keeps DuckDB's SQL: bob's ledger answers for the team, with operators
        got = b.query("SELECT operator, count(*) AS n FROM team.events GROUP BY 1 ORDER BY 1").rows
        assert [r[0] for r in got] == ["alice", "bob"]
        # alice's quarantine is hers: bob's ledger holds none of its own
        assert b.quarantined(600.0) == {}


def test_a_teammates_malformed_rows_cost_their_detail_not_the_pull(store_env, tmp_path):
    """Any controller role may write the store: a detail that is not JSON, a price that is not
    a number, text full of escapes. The pull takes each row; the evidence stays finite."""
    from rentwatch.ledger.team.chain import GENESIS, chain

    server, db = store_env
    evil = "\x1b]52;c;eA==\x07"
    rows = [
        (
            1,
            10.0,
            None,
            "m-1",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            "engine",
            "campaign_start",
            "fact",
            None,
            evil,
            json.dumps({"market": MARKET}),
            None,
        ),
        (
            2,
            11.0,
            None,
            "m-1",
            5,
            77,
            1,
            1,
            evil,
            float("nan"),
            -1.0,
            "rule:create",
            "create",
            "outcome",
            True,
            evil,
            "{not json",
            None,
        ),
        (
            3,
            12.0,
            None,
            "m-1",
            5,
            77,
            1,
            1,
            evil,
            None,
            None,
            "rule:freeze",
            "abandon",
            "fact",
            None,
            evil,
            '["a list"]',
            None,
        ),
        (
            4,
            12.0,
            None,
            "m-1",
            5,
            77,
            None,
            None,
            None,
            None,
            None,
            "rule:freeze",
            "quarantine",
            "fact",
            None,
            evil,
            "{}",
            None,
        ),
    ]
    links = chain(GENESIS, "mallory-ledger", "mallory", rows)
    store = TeamStore(_conf(server, db, "alice"))  # a controller role, writing as mallory
    store.ship(
        "mallory-ledger", "mallory", [(r, p, h) for r, (p, h) in zip(rows, links, strict=True)]
    )
    store.close()
    with Ledger(tmp_path / "b.duckdb") as b:
        sync = TeamSync(b, _conf(server, db, "bob"), MARKET, "bob-1")
        assert sync.round() and sync.pulled == 4
        assert 77 in b.teammates_quarantined(0.0)
        (dud,) = b.team_rentals()
        assert dud.machine_id == 77 and dud.dud
        assert all(math.isfinite(v) and v >= 0 for v in (dud.usd, dud.dph, dud.lifetime_min))


def test_a_rewrite_the_chain_cannot_see_is_named_against_the_ledger(
    store_env, tmp_path, capsys, monkeypatch
):
    """An owner who rewrites the last event and its hash leaves a chain that checks; the
    controller's own ledger names the event (`reconcile --team --ledger PATH`)."""
    from rentwatch.cli.main import main
    from rentwatch.ledger.team.chain import event_hash

    server, db = store_env
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user config here
    path = tmp_path / "a.duckdb"
    with Ledger(path) as ledger:
        _campaign(ledger, "c1")
        _dud(ledger, "c1", 11, 77, 200.0, until=None)
        sync = TeamSync(ledger, _conf(server, db, "alice"), MARKET, "c1")
        assert sync.round()
        ledger.record("note", at=900.0, actor="engine", reason="not shipped", campaign="c1")
        last = ledger.raw_events(0, 100)[-2]
        ledger_id = sync.ledger_id
    with psycopg.connect(server.url(db=db), password=server.password) as c:
        prev = c.execute(
            "SELECT prev_hash FROM rentwatch.events WHERE seq = %s", [last[0]]
        ).fetchone()[0]
        forged = (*last[:15], "a healthy host, honest", *last[16:])
        c.execute(
            "UPDATE rentwatch.events SET reason = %s, hash = %s WHERE seq = %s",
            [forged[15], event_hash(prev, ledger_id, "alice", forged), last[0]],
        )
    url = ["--team-url", server.url(db=db)]
    assert main(["reconcile", "--team", *url, "--json"]) == 0  # the chain alone checks
    capsys.readouterr()
    assert main(["reconcile", "--team", *url, "--ledger", str(path), "--json"]) == 1
    got = json.loads(capsys.readouterr().out)
    assert [(f["seq"], f["problem"]) for f in got["findings"]] == [(last[0], "differs")]
    assert got["unshipped"] == 1 and got["ledger_events"] == last[0] + 1


def test_a_teammates_event_counts_on_the_market_its_campaign_last_started_on(tmp_path):
    """A pull may bring a campaign's restart on another market partway through a batch: what
    came before it stays on the earlier market, what follows it is on the new one."""

    def row(seq: int, campaign: str, kind: str, detail: dict | None = None) -> tuple:
        fields = (seq, 10.0 + seq, None, campaign, None, None, None, None, None, None, None)
        return (*fields, "engine", kind, "fact", None, "r", json.dumps(detail or {}), None, "h")

    elsewhere = "http://127.0.0.1:8/other"
    with Ledger(tmp_path / "b.duckdb") as b:
        replica = b.replica()
        replica.join("bob", MARKET)
        first = [row(1, "m-1", "campaign_start", {"market": elsewhere}), row(2, "m-1", "note")]
        assert replica.add("mate", "mallory", first) == 2
        second = [
            row(3, "m-1", "note"),
            row(4, "m-1", "campaign_start", {"market": MARKET + "/"}),
            row(5, "m-1", "note"),
            row(6, "m-2", "note"),
        ]
        assert replica.add("mate", "mallory", second) == 4
        assert replica.add("mate", "mallory", second) == 0  # pulled again: none twice
        seen = b.query("SELECT seq FROM events WHERE operator = 'mallory'", team=True)
        assert sorted(r[0] % SEQ_SPAN for r in seen.rows) == [4, 5]


@pytest.mark.parametrize("stem", ["team", "mates"])
def test_a_ledger_named_like_the_team_views_is_refused_in_one_line(tmp_path, stem):
    """DuckDB names a ledger's catalog after its file, so `team.duckdb` made `team.events`
    ambiguous and `run --team` died in a traceback; now it is refused, naming a way out, and
    the file still works as a ledger of its own."""
    from rentwatch.core.errors import ConfigError

    led = Ledger(tmp_path / f"{stem}.duckdb")
    with pytest.raises(ConfigError, match=f"{stem}.duckdb cannot join a team.*rename the file"):
        led.replica()
    assert led.record("note", at=1, actor="engine", reason="still a ledger") == 1
    led.close()
