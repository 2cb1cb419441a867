"""Where the team store's settings come from (flags over the config file's `[team]`), what a
controller is handed, the chain's check on rows made by hand, and what a teammate's quarantine
may do in the rules: no server needed."""

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


def test_a_teammates_quarantine_skips_offers_and_never_acts_on_a_held_host():
    """The rules on their own (core): a machine in `Exclusions.team` is not rented; a host this
    fleet holds there gets the very decisions it would get without it; and a failure of ours
    there is quarantined in our own ledger, not skipped as already quarantined."""
    from rentwatch.core.decisions import Abandon
    from rentwatch.core.lifecycle import Phase
    from rentwatch.core.offers.choice import Exclusions, OfferTerms, unfit_reason
    from rentwatch.core.policy import DEFAULT
    from rentwatch.core.preflight.verdict import Verdict
    from rentwatch.core.rules import decide

    from .test_reputation import offer
    from .test_rules import NOW, att, fleet

    o = offer(1, 10, 0.10)
    terms = OfferTerms(1.0, 12.0)
    assert unfit_reason(o, terms, DEFAULT, Exclusions()) is None
    assert "quarantined by a teammate" in unfit_reason(
        o, terms, DEFAULT, Exclusions(team=frozenset({10}))
    )
    held = [
        att(phase=Phase.VERIFIED, status="running", running_at=NOW - 500, passed_preflight=True),
        att(phase=Phase.VERIFIED, status="offline", running_at=NOW - 500, passed_preflight=True),
        att(phase=Phase.BOOTING, status="loading", status_since=NOW - 3000),
    ]
    for a in held:
        mine = decide(fleet(a), DEFAULT, NOW)
        theirs = decide(fleet(a, exclusions=Exclusions(team=frozenset({10}))), DEFAULT, NOW)
        assert [type(d) for d in theirs] == [type(d) for d in mine]
    failing = att(
        phase=Phase.VERIFYING,
        status="running",
        running_at=NOW - 50,
        preflight_started=True,
        verdict=Verdict(False, "cuda_error", "driver too old"),
    )
    [gave_up] = [
        d
        for d in decide(fleet(failing, exclusions=Exclusions(team=frozenset({10}))), DEFAULT, NOW)
        if isinstance(d, Abandon)
    ]
    assert gave_up.quarantine is not None and gave_up.quarantine.machine_id == 10
