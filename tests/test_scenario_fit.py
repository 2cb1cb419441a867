"""A scenario fitted from a real campaign's ledger loads and resembles what the ledger saw."""

from __future__ import annotations

import subprocess
import sys

import pytest
from rentwatch.cli.main import main
from rentwatch.sim.scenario import load_scenario

from .campaigns import run_campaign
from .ledgers import new_ledger


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


def _tier_ledger():
    """One campaign's bid rentals: two creates at 1.15x their min_bid (0.3x and 0.4x of the
    machines' on-demand prices); the RTX 3090 ran 3.5 hours on its bid and was outbid twice, once
    resumed after our rebid (our bid won), once after 30 minutes by itself (the rival left)."""

    led = new_ledger()
    ctx = dict(campaign="tier", machine_id=30, gpu_name="RTX 3090")
    t = 1000.0
    led.record(
        "create", at=t, actor="rule:replace", reason="bid", ok=True, instance_id=301,
        detail={"bid": 0.069, "bid_floor": 0.06, "on_demand_dph": 0.2}, **ctx,
    )  # fmt: skip
    led.record("outbid", at=t + 7200, actor="market", reason="o", ok=True, instance_id=301, **ctx)
    led.record(
        "rebid", at=t + 7260, actor="rule:rebid", reason="r", ok=True, instance_id=301, **ctx
    )
    led.record(
        "resumed", at=t + 7320, actor="market", reason="r", ok=True, instance_id=301,
        detail={"paused_s": 120.0}, **ctx,
    )  # fmt: skip
    led.record("outbid", at=t + 10800, actor="market", reason="o", ok=True, instance_id=301, **ctx)
    led.record(
        "resumed", at=t + 12600, actor="market", reason="r", ok=True, instance_id=301,
        detail={"paused_s": 1800.0}, **ctx,
    )  # fmt: skip
    led.record("destroy", at=t + 14400 + 120, actor="engine", reason="end", ok=True,
               instance_id=301, **ctx)  # fmt: skip
    led.record(
        "create", at=t, actor="rule:replace", reason="bid", ok=True, instance_id=302,
        campaign="tier", machine_id=40, gpu_name='RTX "4090"\x1b[31m',
        detail={"bid": 0.092, "bid_floor": 0.08, "on_demand_dph": 0.2},
    )  # fmt: skip
    led.record(
        "destroy", at=t + 7200, actor="engine", reason="end", ok=True, instance_id=302,
        campaign="tier", machine_id=40, gpu_name='RTX "4090"\x1b[31m',
    )  # fmt: skip
    led.record(  # a garbled create: its prices say nothing
        "create", at=t, actor="rule:replace", reason="bid", ok=True, instance_id=303,
        campaign="tier", machine_id=50, gpu_name="RTX 3090",
        detail={"bid": 0.1, "bid_floor": float("nan"), "on_demand_dph": "lots"},
    )  # fmt: skip
    return led


def test_the_tiers_pressure_is_fitted_from_the_operators_own_bid_rentals(tmp_path):
    """[S]: `scenario from-ledger` fits the interruptible tier too. 2 outbids in 4 hours on a
    bid 1.15x the floor, which a rival beats with odds 0.2 + 0.8 x (1.7 - 1.15) / 0.8 = 0.75:
    2 / 3.5 / 0.75 = 0.762 rivals an hour. The rival's hold is the resume with no rebid of ours."""
    from rentwatch.referee.fit import beaten, fit_bids
    from rentwatch.sim.scenario import Bids

    assert beaten(1.15) == pytest.approx(0.75) and beaten(0.5) == 1.0 and beaten(3.0) == 0.2
    bids = fit_bids(_tier_ledger(), "tier")
    assert bids is not None
    assert bids["floor"] == [0.3, 0.4]
    # a model name from the market: its escape cleaned off, its quotes kept in a quoted key
    assert bids["gpu_pressure"] == {"RTX 3090": pytest.approx(0.762, abs=1e-3), 'RTX "4090"': 0}
    assert bids["hold_min"] == [30.0, 30.0]
    assert fit_bids(_tier_ledger(), "another campaign") is None
    # written out and read back by the simulator as a scenario's `[bids]`
    from rentwatch.referee.fit import to_toml

    data = {"name": "t", "seed": 1, "offers": 20, "host_class": [], "bids": bids}
    path = tmp_path / "tier.toml"
    path.write_text(
        to_toml(data).replace(
            "[bids]", '[[host_class]]\nbehaviour = "healthy"\nshare = 1.0\n\n[bids]'
        )
    )
    loaded = load_scenario(path).bids
    assert (
        isinstance(loaded, Bids) and loaded.floor == (0.3, 0.4) and loaded.hold_min == (30.0, 30.0)
    )
    assert loaded.pressure_for("RTX 3090") == pytest.approx(0.762, abs=1e-3)
    assert loaded.pressure_for('RTX "4090"') == 0 and "\x1b" not in path.read_text()


def test_a_ledger_without_bid_rentals_fits_no_bids_table(make_sim, tmp_path, capsys):
    from rentwatch.referee.fit import fit_bids

    led = new_ledger()
    led.record("create", at=1.0, actor="rule:replace", reason="od", ok=True, instance_id=1,
               campaign="c", machine_id=1, gpu_name="RTX 3090", gpu_dph=0.3)  # fmt: skip
    assert fit_bids(led) is None


HOLDER = """
import sys
from rentwatch.ledger import Ledger
led = Ledger(sys.argv[1])
ctx = dict(campaign="held", machine_id=30, gpu_name="RTX 3090", instance_id=301)
led.record("create", at=1000.0, actor="rule:replace", reason="r", ok=True, **ctx)
led.record("preflight_passed", at=1300.0, actor="engine", reason="v", ok=True, **ctx)
print("holding", flush=True)
sys.stdin.read()
"""


def test_from_ledger_reads_a_copy_of_a_ledger_a_controller_holds(tmp_path, capsys):
    """While a controller writes the ledger, DuckDB lets no other process open it: the fit
    read nothing and advised the ledger screen, which has no fit."""
    path = tmp_path / "held.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        assert main(["scenario", "from-ledger", "--ledger", str(path)]) == 0
        said = capsys.readouterr()
        assert "fitted from a copy taken now" in said.err
        fitted = tmp_path / "fitted.toml"
        fitted.write_text(said.out)
        assert load_scenario(fitted).shares() == {"healthy": 1.0}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["fitted.toml", *_beside(path)]
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0  # the controller's ledger untouched by the copy


def _beside(path):
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name))
