"""A host raises its price under a held rental, on the simulator, whole campaign: the engine
reads the pending increase, the rule decides, the answer and both prices land in the ledger and
the decision log; an accepted increase bills its new price from the contract's end date, as the
market does (`rentwatch reconcile` agrees); a rejected one moves the work, and the rental it
leaves is stopped, never destroyed."""

from __future__ import annotations

import json

import pytest
from rentwatch.cli.main import main
from rentwatch.ledger import Ledger

from .campaigns import run_campaign

JOB = """
[[jobs]]
name = "long"
run = "mkdir -p ckpt out && echo 1 > ckpt/step && echo done > out/r.txt"
artifacts = ["out/r.txt"]
checkpoint = "ckpt"
checkpoint_every_min = 5
ref_gpu = "RTX 4090"
ref_hours = 1.5

[policy]
value_of_time_usd_per_h = 0.0  # no spare hedged beside the one rental
"""


def _market(make_sim, factor: float):
    """A market where one host raises its price, 10 market minutes into the job it runs (the
    first rental whose job started: under load a host may fail its checks, and the next one
    takes the job), with an hour's notice."""
    sim = make_sim(
        seed=21,
        offers=12,
        time_scale=300,
        host_class=[{"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "dph": [0.3, 0.4]}],
        price_rise={"share": 1.0, "factor": [factor, factor], "notice_min": [60, 60]},
    )
    rises = sim.market.rises

    def working(inst):  # replaces the scenario's draw of when (and on which rental) it rises
        if inst.id in rises._planned or rises._planned:
            return rises._planned.get(inst.id)
        meter = next((m for m in sim.market.meters if m.instance_id == inst.id), None)
        if meter is None:
            return None  # asked again at the market's next step
        rises._planned[inst.id] = meter.started_at + 600
        return rises._planned[inst.id]

    rises._plan = working
    return sim


def _reconciled(capsys, sim, ledger, monkeypatch) -> dict:
    capsys.readouterr()
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    code = main(["reconcile", "--ledger", str(ledger), "--market-url", sim.url, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    return out


def test_an_increase_still_worth_it_is_accepted_billed_and_reconciled(
    make_sim, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    sim = _market(make_sim, 1.05)
    code, path = run_campaign(sim, tmp_path, name="pa", fleet=1, extra=JOB)
    assert code == 0
    led = Ledger(path)
    [answer] = led.events(where="kind = 'price_increase' AND phase = 'outcome'")
    assert answer.ok and answer.detail["decision"] == "accept"
    assert answer.actor == "rule:price_accept" and "still the better buy" in answer.reason
    [row] = sim.market.rises.rows.values()
    first = row.instance.id
    assert answer.instance_id == first
    assert row.status == "applied"
    assert answer.detail["new_gpu_dph"] == pytest.approx(row.new_dph)
    assert answer.detail["old_gpu_dph"] == pytest.approx(row.old_dph)
    [price] = led.events(where="kind = 'price'")
    assert price.at == pytest.approx(row.contract_end) and price.instance_id == first
    assert price.detail["price"] == pytest.approx(row.new_dph)
    # the market bills the new price from the end date on; so does the ledger (reconcile)
    assert sim.market.instances[first].prices[-1] == (row.contract_end, row.new_dph)
    [done] = led.events(where="kind = 'job_finished' AND ok")
    assert done.instance_id == first and done.at > row.contract_end  # at the new price
    led.close()
    out = _reconciled(capsys, sim, path, monkeypatch)
    assert out["differences"] == [] and out["market_usd"] > 0


def test_an_increase_dearer_than_a_move_is_rejected_and_the_work_moves(
    make_sim, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    sim = _market(make_sim, 4.0)
    code, path = run_campaign(sim, tmp_path, name="pr", fleet=1, extra=JOB)
    assert code == 0
    led = Ledger(path)
    [intent] = led.events(where="kind = 'price_increase' AND phase = 'intent'")
    [answer] = led.events(where="kind = 'price_increase' AND phase = 'outcome'")
    assert answer.ok and answer.detail["decision"] == "reject"
    assert intent.actor == answer.actor == "rule:price_reject"
    assert "dearer than a move" in answer.reason
    assert answer.detail["new_gpu_dph"] > 3 * answer.detail["old_gpu_dph"]
    first = answer.instance_id
    assert led.events(where="kind = 'price'") == []  # never billed at the new price
    # its work moved: interrupted there, finished on another rental
    [moved] = led.events(where=f"kind = 'job_finished' AND NOT ok AND instance_id = {first}")
    assert "raised its price" in moved.reason
    [done] = led.events(where="kind = 'job_finished' AND ok")
    assert done.instance_id != first
    # stopped by the rule, never destroyed by automation
    stops = led.events(where=f"kind = 'stop' AND phase = 'outcome' AND instance_id = {first}")
    assert stops and stops[0].actor == "rule:price_reject"
    assert led.events(where=f"kind = 'destroy' AND instance_id = {first}") == []
    led.close()
    out = _reconciled(capsys, sim, path, monkeypatch)
    assert out["differences"] == []
