"""`rentwatch offers`: the offers a campaign would rent, ranked as its policy ranks them, with
the expected cost per delivered hour; it rents nothing, and its first offer is the one a run
started at once rents first."""

from __future__ import annotations

import json
from collections import Counter

from rentwatch.cli.main import main
from rentwatch.core.models import Offer
from rentwatch.core.offers.choice import Exclusions, OfferTerms, unfit_reason
from rentwatch.core.policy import get_policy
from rentwatch.ledger import Ledger

from tests.campaigns import campaign_text, run_campaign

SIZED = """
rental = "auto"

[[jobs]]
name = "j1"
run = "mkdir -p out ckpt && echo 1 > out/r.txt"
artifacts = ["out/"]
ref_gpu = "RTX 4090"
ref_hours = 0.2
checkpoint = "ckpt"
checkpoint_every_min = 10
"""


def _offers(capsys, sim, campaign, ledger, *more: str) -> tuple[int, list[dict]]:
    code = main(
        ["offers", "--campaign", str(campaign), "--market-url", sim.url, "--ledger", str(ledger)]
        + ["--json", *more]
    )
    return code, json.loads(capsys.readouterr().out)


def test_preview_ranks_rents_nothing_and_names_what_does_not_fit(
    make_sim, tmp_path, capsys, monkeypatch
):
    sim = make_sim(seed=3, offers=30, time_scale=5)
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    f = tmp_path / "c.toml"
    f.write_text(campaign_text(name="pv", fleet=2, extra=SIZED))
    code, rows = _offers(capsys, sim, f, tmp_path / "none.duckdb", "--all")
    assert code == 0 and rows
    ranked = [r for r in rows if r["rank"] is not None]
    assert [r["rank"] for r in ranked] == list(range(1, len(ranked) + 1))
    # the default policy ranks sized jobs by expected cost per delivered reference hour, as
    # the engine's rules do: the figure shown is the order
    per_ref = [r["usd_per_ref_hour"] for r in ranked]
    assert per_ref == sorted(per_ref)
    costs = [r["expected_usd_per_delivered_hour"] for r in ranked]
    assert all(c > r["dph"] for c, r in zip(costs, ranked, strict=True))
    assert len({r["machine_id"] for r in ranked}) == len(ranked)  # one offer per machine
    assert all(r["dph"] <= 0.60 and r["unfit"] is None for r in ranked)
    unfit = [r for r in rows if r["rank"] is None]
    assert unfit and all(r["unfit"] for r in unfit)
    assert all("over the campaign's max_dph" in r["unfit"] for r in unfit if r["dph"] > 0.6)
    assert sim.call(lambda: len(sim.market.instances)) == 0  # nothing rented

    # the naive policy ranks by price alone
    capsys.readouterr()
    code, naive = _offers(capsys, sim, f, tmp_path / "none.duckdb", "--policy", "naive")
    prices = [r["dph"] for r in naive]
    assert code == 0 and prices == sorted(prices) and all(r["rank"] for r in naive)


def test_first_offer_is_what_a_run_rents_first(make_sim, tmp_path, capsys, monkeypatch):
    sim = make_sim(seed=5, offers=30, time_scale=300)
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    f = tmp_path / "c.toml"
    f.write_text(campaign_text(name="first", fleet=1))
    ledger = tmp_path / "l.duckdb"
    code, rows = _offers(capsys, sim, f, ledger)
    assert code == 0
    code, _ = run_campaign(sim, tmp_path, name="first", fleet=1, ledger=ledger)
    with Ledger(ledger, read_only=True) as led:
        chosen = led.events(where="kind = 'offer_chosen'")
        record = Counter(r.machine_id for r in led.rentals() if r.verified or r.dud)
    assert chosen[0].offer_id == rows[0]["offer_id"]
    assert chosen[0].reason == rows[0]["why"]  # the sentence the ledger records for it

    # now our ledger knows machines: their odds are our record's, not the flat prior
    capsys.readouterr()
    code, again = _offers(capsys, sim, f, ledger, "--all")
    seen = [r for r in again if r["machine_id"] in record]
    assert seen and all(r["runs_on_record"] == record[r["machine_id"]] for r in seen)
    assert len({r["p_deliver"] for r in again}) > 1


def test_table_and_no_fit(make_sim, tmp_path, capsys, monkeypatch):
    sim = make_sim(seed=3, offers=20, time_scale=5)
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    f = tmp_path / "c.toml"
    f.write_text(campaign_text(name="tbl", fleet=2))
    args = ["offers", "--campaign", str(f), "--market-url", sim.url, "--ledger", str(f) + ".x"]
    assert main([*args, "--limit", "3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "ranked by expected_cost" in out and "the 2 marked * would be rented first" in out
    assert "more: --limit N" in out
    cheap = tmp_path / "cheap.toml"
    cheap.write_text(campaign_text(name="tbl", fleet=2).replace("max_dph = 0.60", "max_dph = 0.01"))
    assert main(["offers", "--campaign", str(cheap), "--market-url", sim.url]) == 1
    assert "no offer fits tbl now" in capsys.readouterr().out


def _offer(**kw) -> Offer:
    base = dict(
        id=1,
        machine_id=9,
        host_id=None,
        gpu_name="RTX 4090",
        num_gpus=1,
        dph_total=0.3,
        gpu_dph=0.3,
        storage_cost=0.1,
        cuda_max_good=12.4,
        reliability=0.99,
        driver_version="550.54",
        gpu_ram_mb=24000,
        geolocation=None,
    )
    return Offer(**{**base, **kw})  # type: ignore[arg-type]


def test_unfit_reasons():
    terms, pol = OfferTerms(0.5, 12.4), get_policy("default")
    none = Exclusions()
    assert unfit_reason(_offer(), terms, pol, none) is None
    assert "max_dph" in unfit_reason(_offer(dph_total=0.9), terms, pol, none)
    assert "CUDA 12.1" in unfit_reason(_offer(cuda_max_good=12.1), terms, pol, none)
    assert "quarantined" in unfit_reason(_offer(), terms, pol, Exclusions(frozenset({9})))
    assert "not a finite" in unfit_reason(_offer(dph_total=float("nan")), terms, pol, none)


def test_escapes_in_offers_reach_no_terminal(make_sim, tmp_path, capsys, monkeypatch):
    # a market whose GPU names carry an OSC 52 clipboard write, a title change, a clear-screen
    from tests.hostile_market import HostileMarket, Hostility
    from tests.shown_text import is_clean

    sim = make_sim(seed=3, offers=30, time_scale=5)
    proxy = HostileMarket(sim.url, Hostility(escape_gpu_names=True, seed=3)).start()
    try:
        monkeypatch.setenv("VAST_API_KEY", sim.api_key)
        f = tmp_path / "c.toml"
        f.write_text(campaign_text(name="esc", fleet=2))
        base = ["offers", "--campaign", str(f), "--market-url", proxy.url]
        base += ["--ledger", str(tmp_path / "none.duckdb"), "--all"]
        main([*base, "--limit", "100"])
        table = capsys.readouterr()
        main([*base, "--json"])
        rows = json.loads(capsys.readouterr().out)
    finally:
        proxy.stop()
    assert proxy.injected.get("offer_escapes", 0) > 0
    for bad in ("\x1b", "\x9b", "\x07", "\u202e"):
        assert bad not in table.out and bad not in table.err, repr(bad)
    assert rows and all(is_clean(r["gpu"]) for r in rows)
    assert all(is_clean(r["why"] or r["unfit"] or "") for r in rows)
