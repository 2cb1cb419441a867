"""A scenario fitted from a real campaign's ledger loads and resembles what the ledger saw."""

from __future__ import annotations

from rentwatch.cli.main import main
from rentwatch.sim.scenario import load_scenario

from .campaigns import run_campaign


def test_from_ledger_round_trip(make_sim, tmp_path, capsys):
    sim = make_sim(seed=7, offers=60, time_scale=240)
    code, ledger = run_campaign(sim, tmp_path, "seed", name="fitme", fleet=3)
    assert code == 0
    capsys.readouterr()  # the campaign's own log lines
    assert main(["scenario", "from-ledger", "--ledger", str(ledger)]) == 0
    text = capsys.readouterr().out
    path = tmp_path / "fitted.toml"
    path.write_text(text)
    scenario = load_scenario(path)
    shares = scenario.shares()
    assert abs(sum(shares.values()) - 1) < 1e-9
    assert "healthy" in shares or "throttled" in shares
    assert all(0.01 <= hc.dph[0] <= hc.dph[1] for hc in scenario.host_classes)
    assert main(["scenario", "from-ledger", "--ledger", str(ledger), "--campaign", "nope"]) == 1
