"""The team store's commands against a real PostgreSQL server: `team init`, `ledger --team`,
`ls --team --json`, `reconcile --team`, and where the password may come from."""

from __future__ import annotations

import json
import os

import pytest
from rentwatch.cli.main import main
from rentwatch.ledger import Ledger
from rentwatch.ledger.team.config import TeamConfig
from rentwatch.ledger.team.sync import TeamSync

from .team_pg import PgServer
from .test_team_store import MARKET, _campaign, _dud


@pytest.fixture
def no_user_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "rentwatch" / "config.toml"


def test_a_url_with_a_password_is_refused_and_never_echoed(tmp_path, capsys, no_user_config):
    code = main(
        [
            "ledger",
            "--team",
            "--team-url",
            "postgresql://alice:s3cr3t-pw@127.0.0.1:1/team",
            "SELECT 1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "carries a password" in err and "s3cr3t-pw" not in err
    # nor in a config file
    no_user_config.parent.mkdir(parents=True)
    no_user_config.write_text('[team]\nurl = "postgresql://bob:hunter2@db/team"\n')
    assert main(["ls", "--team", "--json"]) == 2
    err = capsys.readouterr().err
    assert "carries a password" in err and "hunter2" not in err


def test_a_password_file_others_may_read_is_refused(tmp_path, capsys, no_user_config):
    pw = tmp_path / "pw"
    pw.write_text("s3cr3t\n")
    pw.chmod(0o644)
    code = main(
        [
            "reconcile",
            "--team",
            "--team-url",
            "postgresql://a@127.0.0.1:1/t",
            "--team-password-file",
            str(pw),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "chmod 600" in err and "s3cr3t" not in err


def test_no_team_store_named_is_one_clear_line(capsys, no_user_config):
    assert main(["ls", "--team"]) == 2  # a reader's --team takes no URL: it names the one that does
    assert "give --team-url URL or set [team] url" in capsys.readouterr().err


def test_init_ledger_ls_and_reconcile_against_the_store(
    pg_server: PgServer,
    team_db: str,
    tmp_path,
    capsys,
    monkeypatch,
    no_user_config,
):
    server, db = pg_server, team_db
    monkeypatch.setenv("PGPASSWORD", server.password)
    server.admin(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'carol') THEN "
        f"CREATE ROLE carol LOGIN PASSWORD '{server.password}'; END IF; END $$"
    )
    assert main(["team", "init", server.url(db=db), "--grant", "carol"]) == 0
    assert "granted rentwatch_controller to carol" in capsys.readouterr().out
    # carol's password from a file of hers (0600), not the environment
    monkeypatch.delenv("PGPASSWORD")
    pw = tmp_path / "carol.pw"
    pw.write_text(server.password + "\n")
    pw.chmod(0o600)
    carol = TeamConfig(server.url("carol", db), "carol", pw)
    with Ledger(tmp_path / "c.duckdb") as ledger:
        _campaign(ledger, "carol-1")
        _dud(ledger, "carol-1", 11, 77, 200.0, until=None)
        sync = TeamSync(ledger, carol, MARKET, "carol-1")
        assert sync.round()
        n = len(ledger.raw_events(0, 1000))
    # the config file names the store: a bare --team reads it
    no_user_config.parent.mkdir(parents=True)
    no_user_config.write_text(
        f'[team]\nurl = "{server.url("carol", db)}"\npassword_file = "{pw}"\n'
    )
    assert main(["ls", "--team", "--json"]) == 0
    live = json.loads(capsys.readouterr().out)
    assert [(c["operator"], c["campaign"], c["pid"]) for c in live] == [
        ("carol", "carol-1", os.getpid())
    ]
    assert set(live[0]) >= {"operator", "campaign", "host", "pid", "last_seen"}
    sql = "SELECT operator, count(*) AS n FROM events GROUP BY 1"
    assert main(["ledger", "--team", "--json", sql]) == 0
    assert json.loads(capsys.readouterr().out) == [{"operator": "carol", "n": n}]
    assert main(["ledger", "--team", "--json", "SELECT machine_id, duds FROM hosts"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"machine_id": 77, "duds": 1}]
    # the team's receipt per operator, as docs/team.md spells it
    per_operator = (
        "SELECT operator, sum(total_usd) AS usd FROM tenures JOIN (SELECT DISTINCT campaign, "
        "operator FROM events) USING (campaign) GROUP BY 1"
    )
    assert main(["ledger", "--team", "--json", per_operator]) == 0
    assert [r["operator"] for r in json.loads(capsys.readouterr().out)] == ["carol"]
    # a controller's own ledger holds the union too, in its `team` schema
    code = main(
        [
            "ledger",
            "--ledger",
            str(tmp_path / "c.duckdb"),
            "--json",
            "SELECT machine_id, duds FROM team.hosts",
        ]
    )
    assert code == 0 and json.loads(capsys.readouterr().out) == [{"machine_id": 77, "duds": 1}]
    assert main(["reconcile", "--team", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["ledgers"], got["events"], got["findings"]) == (1, n, [])
    server.admin("UPDATE rentwatch.events SET machine_id = 78 WHERE seq = 4", db=db)
    assert main(["reconcile", "--team"]) == 1
    out = capsys.readouterr().out
    assert "carol" in out and "event 4: edited" in out
    # an ended controller is no longer live
    with Ledger(tmp_path / "c.duckdb") as ledger:
        TeamSync(ledger, carol, MARKET, "carol-1").stop()
    assert main(["ls", "--team", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_teammates_hostile_text_reaches_no_terminal_raw(
    pg_server: PgServer, team_db: str, capsys, monkeypatch, no_user_config
):
    """Any controller role may write the store: its operator, campaign and host names are text
    to clean, as a host's are."""
    server, db = pg_server, team_db
    monkeypatch.setenv("PGPASSWORD", server.password)
    assert main(["team", "init", server.url(db=db)]) == 0
    capsys.readouterr()
    evil = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\u202eevil"
    server.admin(
        "INSERT INTO rentwatch.heartbeats (ledger_id, operator, campaign, host, pid) "
        f"VALUES ('x', '{evil}', '{evil}', '{evil}', 1)",
        db=db,
    )
    assert main(["ls", "--team", "--team-url", server.url(db=db)]) == 0
    out = capsys.readouterr().out
    assert "evil" in out and "\x1b" not in out and "\x07" not in out and "\u202e" not in out
