"""Commands find the user's ledger that knows what they are about when `--ledger` is not given
(issue 29's newcomer pass: after the demo, `rentwatch ssh ID` and the quit dialog's own hint
`rentwatch end --campaign demo --destroy` failed, the one with "no ledger at .../ledger.duckdb",
the other for want of --ledger; the demo's ledger is demo-ledger.duckdb beside it)."""

from __future__ import annotations

import pytest
from rentwatch.cli.ledger_pick import NoLedger, ledger_for
from rentwatch.cli.main import main
from rentwatch.ledger import Ledger


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("RENTWATCH_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    home = tmp_path / "data" / "rentwatch"
    home.mkdir(parents=True)
    return home


def _ledger(path, campaign: str, instance: int, stopped: bool = False) -> None:
    with Ledger(path) as led:
        ctx = dict(campaign=campaign, machine_id=5)
        seq = led.intent("create", at=100.0, actor="engine", reason="offer", offer_id=9, **ctx)
        led.outcome(seq, at=101.0, ok=True, instance_id=instance, **ctx)
        led.record(
            "ssh_route",
            at=120.0,
            actor="engine",
            reason="reached",
            instance_id=instance,
            detail={"kind": "direct", "where": "127.0.0.1:2222"},
            **ctx,
        )
        if stopped:
            seq = led.intent("stop", at=130.0, actor="rule:drained", reason="idle", **ctx)
            led.outcome(seq, at=131.0, ok=True, instance_id=instance, **ctx)


def test_the_one_ledger_that_knows_the_campaign_or_instance_is_read(data):
    demo = data / "demo-ledger.duckdb"
    _ledger(demo, "demo", 77)
    assert ledger_for(None, campaign="demo") == demo
    assert ledger_for(None, instance=77) == demo
    assert ledger_for(str(data / "x.duckdb"), campaign="demo") == data / "x.duckdb"  # named
    with pytest.raises(NoLedger, match="demo-ledger.duckdb"):  # it says which there are
        ledger_for(None, campaign="sweep")
    # the default ledger, holding another campaign, does not hide the demo's
    _ledger(data / "ledger.duckdb", "sweep", 88)
    assert ledger_for(None, campaign="demo") == demo
    assert ledger_for(None, instance=88) == data / "ledger.duckdb"
    # two that know it, the default not among them: the person names one
    _ledger(data / "other.duckdb", "demo", 99)
    with pytest.raises(NoLedger, match="in 2 ledgers"):
        ledger_for(None, campaign="demo")


def test_ssh_and_end_without_ledger_find_the_demos(data, capsys, make_sim, monkeypatch):
    _ledger(data / "demo-ledger.duckdb", "demo", 77)
    (data / "id_ed25519").write_text("not a real key\n")
    assert main(["ssh", "77", "--print"]) == 0
    assert "root@127.0.0.1" in capsys.readouterr().out
    # nothing of it held (no controller, no rental the ledger still bills, none the market
    # lists under its label; without a controller, end asks the market first): nothing to do
    sim = make_sim(seed=1, offers=5)
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    _ledger(data / "ended.duckdb", "done", 55)
    with Ledger(data / "ended.duckdb") as led:
        seq = led.intent("destroy", at=140.0, actor="human", reason="end", campaign="done")
        led.outcome(seq, at=141.0, ok=True, instance_id=55, campaign="done")
    end = ["end", "--campaign", "done", "--market-url", sim.url, "--yes", "done"]
    assert main(end) == 0
    assert "nothing of done is left billing" in capsys.readouterr().out


def test_ssh_into_a_stopped_rental_names_the_start_key(data, capsys):
    _ledger(data / "demo-ledger.duckdb", "demo", 77, stopped=True)
    assert main(["ssh", "77", "--print"]) == 2
    err = capsys.readouterr().err
    assert "is stopped" in err and "`a` in the dashboard" in err  # `s` is Stop


def test_receipt_and_ledger_without_ledger_read_the_demos(data, capsys):
    """After `rentwatch demo`, `rentwatch receipt` and `rentwatch ledger SQL` read its
    ledger, not a missing default one; with two ledgers and no campaign they say which."""
    _ledger(data / "demo-ledger.duckdb", "demo", 77)
    assert main(["receipt", "--json"]) == 0
    assert '"demo"' in capsys.readouterr().out
    assert main(["ledger", "--json", "select count(*) n from events"]) == 0
    assert '"n": 3' in capsys.readouterr().out  # the demo's three events
    _ledger(data / "ledger.duckdb", "sweep", 88)  # the default one, as a real run makes
    assert main(["receipt", "--campaign", "demo", "--json"]) == 0
    assert '"demo"' in capsys.readouterr().out
    assert main(["receipt", "--json"]) == 0  # the default is read when it has anything
    assert '"sweep"' in capsys.readouterr().out


def test_reconcile_without_ledger_reads_the_campaigns(data, capsys):
    # a newcomer's `rentwatch reconcile --campaign demo-2` said "no ledger at .../ledger.duckdb"
    _ledger(data / "demo-ledger.duckdb", "demo", 77)
    code = main(
        ["reconcile", "--campaign", "demo", "--market-url", "http://127.0.0.1:9", "--api-key", "k"]
    )
    err = capsys.readouterr().err
    assert "no ledger" not in err and "no campaign" not in err
    # it got as far as asking the market for its bill
    assert code == 2 and "cannot reach the market at http://127.0.0.1:9" in err
