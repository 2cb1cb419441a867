"""Where the team store's settings come from (flags over the config file's `[team]`), what a
controller is handed, and the chain's check on rows made by hand: no server needed."""

from __future__ import annotations

import pytest
from rentwatch.cli.main import build_parser
from rentwatch.cli.team import team_argv
from rentwatch.ledger.team.chain import GENESIS, chain, verify
from rentwatch.ledger.team.config import TeamConfigError, resolve


def test_flags_win_over_the_config_file_and_the_operator_defaults_to_the_user(tmp_path):
    section = {"url": "postgresql://alice@db/team", "operator": "alice"}
    assert resolve(None, None, None, {}) is None
    conf = resolve(None, None, None, section)
    assert conf is not None and (conf.url, conf.operator) == (section["url"], "alice")
    conf = resolve("postgresql://bob@db/team", "bob", None, section)
    assert conf is not None and (conf.url, conf.operator) == ("postgresql://bob@db/team", "bob")
    conf = resolve("postgresql://carol@db/team", None, None, {})
    assert conf is not None and conf.operator  # the login name
    with pytest.raises(TeamConfigError, match="need --team URL"):
        resolve(None, "dave", None, {})
    with pytest.raises(TeamConfigError, match="letters, digits"):
        resolve("postgresql://e@db/t", "e\x1b[2J", None, {})
    with pytest.raises(TeamConfigError, match="PostgreSQL URL"):
        resolve("mysql://e@db/t", None, None, {})
    with pytest.raises(TeamConfigError, match="carries a password"):
        resolve("host=db user=e password=pw dbname=t", None, None, {})


def test_a_controller_started_for_watch_or_demo_gets_the_team_without_a_password(tmp_path):
    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    pw.chmod(0o600)
    conf = resolve("postgresql://alice@db/team", "alice", str(pw), {})
    argv = team_argv(conf)
    assert "secret" not in " ".join(argv)
    args = build_parser().parse_args(["controller", "--ledger", "l.duckdb", *argv])
    assert (args.team, args.operator, args.team_password_file) == (
        "postgresql://alice@db/team",
        "alice",
        str(pw.resolve()),
    )
    for cmd in (["run", "--headless", "--campaign", "c.toml"], ["watch"], ["demo"]):
        assert build_parser().parse_args([*cmd, *argv]).team == "postgresql://alice@db/team"


def test_the_chain_check_names_each_fault_once():
    rows = [
        (
            seq,
            float(seq),
            None,
            "c",
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            "engine",
            "note",
            "fact",
            None,
            f"n{seq}",
            "{}",
            None,
        )
        for seq in range(1, 6)
    ]
    links = chain(GENESIS, "L", "alice", rows)
    stored = [(r, p, h, "alice") for r, (p, h) in zip(rows, links, strict=True)]
    assert verify("L", "alice", stored, shipped_to=5) == []
    edited = list(stored)
    edited[2] = ((*rows[2][:15], "changed", *rows[2][16:]), *stored[2][1:])
    assert [(f.seq, f.problem) for f in verify("L", "alice", edited)] == [(3, "edited")]
    gap = stored[:2] + stored[3:]
    assert [(f.seq, f.problem) for f in verify("L", "alice", gap)] == [(3, "missing")]
    assert [(f.seq, f.problem) for f in verify("L", "alice", stored[:4], shipped_to=5)] == [
        (5, "missing")
    ]
    swapped = [stored[0], stored[2], stored[1], *stored[3:]]
    assert {f.problem for f in verify("L", "alice", swapped)} >= {"missing"}
