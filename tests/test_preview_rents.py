"""`rentwatch offers` is the engine's own choice: the machines a campaign then rents first, on
the tier and at the bid the preview said, for an on-demand campaign and for a bid campaign
(`rental = "auto"`, sized checkpointing jobs), on the same market with the same ledger."""

from __future__ import annotations

import json

from rentwatch.cli.main import main
from rentwatch.ledger import Ledger

from .campaigns import campaign_text, checkpointing_jobs, run_campaign

BID = 'rental = "auto"\n' + checkpointing_jobs(3, every_min=5, retries=1, ref_hours=0.1)
SIZED_ON_DEMAND = checkpointing_jobs(3, every_min=5, retries=1, ref_hours=0.1)
# on the stepped clock: the market's time moves only while the engine waits on it, so the
# offers the preview named are the ones the campaign's first two polls find (wall-paced at 300x,
# a loaded box let a named offer go between them)
MARKET = dict(
    stepped=True,
    offers=30,
    host_class=[
        {"behaviour": "healthy", "share": 0.7, "gpu": ["RTX 3060", "RTX 4090"], "dph": [0.1, 0.5]},
        {"behaviour": "freeze_pull", "share": 0.3, "gpu": ["RTX 3060"], "dph": [0.05, 0.2]},
    ],
    # min_bid holds still between the preview and the campaign's first search (a few wall
    # seconds, many market minutes on a loaded box): the same market for both
    bids={"drift": 0.0, "day_swing": 0.0, "pressure": 0.05},
)


def _preview(capsys, sim, campaign, ledger) -> list[dict]:
    capsys.readouterr()
    args = ["offers", "--campaign", str(campaign), "--market-url", sim.url]
    assert main([*args, "--ledger", str(ledger), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _first_creates(ledger, n: int) -> list:
    with Ledger(ledger, read_only=True) as led:
        return led.events(where="kind = 'create' AND phase = 'intent'")[:n]


def _check(make_sim, tmp_path, capsys, monkeypatch, seed: int, extra: str) -> list[dict]:
    monkeypatch.chdir(tmp_path)
    sim = make_sim(seed=seed, **MARKET)
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    f = tmp_path / "c.toml"
    f.write_text(campaign_text(name="pv", fleet=2, extra=extra))
    ledger = tmp_path / "l.duckdb"
    rows = _preview(capsys, sim, f, ledger)
    first = [r for r in rows if r["rents_first"]]
    assert first and [r["rank"] for r in first] == list(range(1, len(first) + 1))
    code, _ = run_campaign(sim, tmp_path, name="pv", fleet=2, ledger=ledger, extra=extra)
    creates = _first_creates(ledger, len(first))
    assert [e.machine_id for e in creates] == [r["machine_id"] for r in first]
    for e, r in zip(creates, first, strict=True):
        # on the tier the preview said, at its bid (min_bid may drift a little in between)
        assert (e.detail.get("bid") is None) == (r["bid"] is None), (e.detail, r)
        assert (r["tier"] == "interruptible") == (r["bid"] is not None)
    return rows


def test_on_demand_campaign_rents_what_offers_named_first(make_sim, tmp_path, capsys, monkeypatch):
    rows = _check(make_sim, tmp_path, capsys, monkeypatch, 11, SIZED_ON_DEMAND)
    ranked = [r for r in rows if r["rank"] is not None]
    assert all(r["tier"] == "on-demand" and r["bid"] is None for r in ranked)
    assert all(r["usd_per_ref_hour"] is not None for r in ranked)


def test_bid_campaign_rents_what_offers_named_first(make_sim, tmp_path, capsys, monkeypatch):
    rows = _check(make_sim, tmp_path, capsys, monkeypatch, 11, BID)
    ranked = [r for r in rows if r["rank"] is not None]
    bids = [r for r in ranked if r["bid"] is not None]
    assert bids, "auto bid nowhere: the test proves nothing"
    for r in bids:  # the fields a bid row carries, and the bid's price under on-demand
        assert r["tier"] == "interruptible" and r["bid_floor"] is not None
        assert r["bid_floor"] <= r["bid"] < r["on_demand_dph"]
        assert r["usd_per_ref_hour"] is not None and r["dph"] >= r["bid"]


def _plan(capsys, sim, campaign, ledger, *how: str) -> tuple[int, dict | str]:
    capsys.readouterr()
    args = [*how, "--campaign", str(campaign), "--market-url", sim.url, "--ledger", str(ledger)]
    code = main(args)
    out = capsys.readouterr().out
    return code, json.loads(out) if "--json" in how else out


def test_plan_prices_the_job_set_from_the_policy_odds_and_the_ledger(
    make_sim, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    sim = make_sim(seed=11, **MARKET)
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    f = tmp_path / "c.toml"
    f.write_text(campaign_text(name="pv", fleet=2, extra=BID))
    ledger = tmp_path / "l.duckdb"
    code, cold = _plan(capsys, sim, f, ledger, "offers", "--plan", "--json")
    assert code == 0
    c, h = cold["cost_usd"], cold["hours"]
    assert cold["floor_usd"] < c["p10"] <= c["median"] <= c["p90"]
    assert 0 < h["p10"] <= h["median"] <= h["p90"]
    assert cold["sized_jobs"] == 3 and cold["work_ref_h"] == 0.3 and cold["unsized_jobs"] == []
    assert cold["odds"]["odds_runs"] == 8.0  # the default policy's prior alone: no run seen
    # the first rentals as the preview names them, a bid with its min_bid and price per ref-h
    bids = [r for r in cold["first"] if r["bid"] is not None]
    assert bids and all(r["bid_floor"] <= r["bid"] and r["usd_per_ref_hour"] for r in bids)
    code, text = _plan(capsys, sim, f, ledger, "plan")  # the alias, as text
    assert code == 0 and "p10-p90" in text and "floor" in text and "bid $" in text

    # after a campaign, the ledger's record of runs stands behind the next campaign's odds;
    # the campaign itself has nothing left to run
    run_campaign(sim, tmp_path, name="pv", fleet=2, ledger=ledger, extra=BID)
    nxt = tmp_path / "next.toml"
    nxt.write_text(campaign_text(name="pv2", fleet=2, extra=BID))
    code, warm = _plan(capsys, sim, nxt, ledger, "plan", "--json")
    assert code == 0 and warm["odds"]["odds_runs"] > cold["odds"]["odds_runs"]
    code, done = _plan(capsys, sim, f, ledger, "plan")
    assert code == 1 and "no job left to run has a size" in done

    # nothing sized: nothing to price, said so
    g = tmp_path / "u.toml"
    g.write_text(campaign_text(name="un", fleet=1, extra='[[jobs]]\nname = "a"\nrun = "true"\n'))
    code, text = _plan(capsys, sim, g, ledger, "plan")
    assert code == 1 and "no job left to run has a size" in text
