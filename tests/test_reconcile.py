"""`rentwatch reconcile`: after a real campaign against the simulator the ledger agrees with the
market's own bill (`GET /api/v0/charges/`) to the cent; a tampered copy of the ledger is caught,
instance by instance, with a cause."""

from __future__ import annotations

import json
import shutil

import duckdb
from rentwatch.cli.main import main
from rentwatch.ledger.reconcile import MarketCharge, likely_cause, market_by_instance, reconcile

from tests.campaigns import run_campaign


def _reconcile(capsys, sim, ledger, *more: str) -> tuple[int, dict]:
    # the market allows a key one read of its charges a market second, and a stepped market's
    # clock stands between the campaign's steps: each call comes a market second after the last
    sim.call(sim.market.clock.advance, 1.5)
    code = main(["reconcile", "--ledger", str(ledger), "--market-url", sim.url, "--json", *more])
    return code, json.loads(capsys.readouterr().out)


def test_campaign_reconciles_and_tampering_is_named(make_sim, tmp_path, capsys, monkeypatch):
    sim = make_sim(seed=5, offers=30, stepped=True)
    code, ledger = run_campaign(sim, tmp_path, fleet=2, name="rc")
    assert code == 0
    capsys.readouterr()  # the campaign's own log lines
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)

    rc, out = _reconcile(capsys, sim, ledger, "--campaign", "rc")
    assert rc == 0, out
    assert out["differences"] == []
    assert out["market_usd"] > 0 and abs(out["ledger_usd"] - out["market_usd"]) < 0.05

    # a copy where one rental's GPU price was inflated and another's create erased
    forged = tmp_path / "forged.duckdb"
    shutil.copy(ledger, forged)
    con = duckdb.connect(str(forged))
    # the inflated one must have billed GPU time (a dud destroyed while loading under `running`
    # billing has none, so its price would change nothing); the erased one is another
    ids = [
        r[0]
        for r in con.execute(
            "SELECT instance_id FROM instance_charges WHERE gpu_usd > 0 "
            "ORDER BY gpu_usd DESC, instance_id LIMIT 1"
        ).fetchall()
    ]
    ids += [
        r[0]
        for r in con.execute(
            "SELECT instance_id FROM events WHERE kind = 'create' AND phase <> 'intent' AND ok "
            "AND instance_id <> ? ORDER BY instance_id",
            ids,
        ).fetchall()
    ]
    con.execute(
        "UPDATE events SET gpu_dph = gpu_dph * 50 + 1 WHERE kind = 'create' AND instance_id = ?",
        [ids[0]],
    )
    con.execute("DELETE FROM events WHERE instance_id = ?", [ids[-1]])
    con.close()
    rc, out = _reconcile(capsys, sim, forged)
    named = {d["instance_id"]: d for d in out["differences"]}
    assert rc == 1
    assert ids[0] in named and "GPU" in named[ids[0]]["cause"]
    market_last = sim.call(
        lambda: (
            sim.market.instances[ids[-1]]
            .charges(sim.market.clock.now(), sim.market.scenario.gpu_billing)
            .total_usd
        )
    )
    if market_last > 0.01:
        assert ids[-1] in named and "never recorded" in named[ids[-1]]["cause"]


def test_charges_rows_as_the_official_cli_reads_them():
    rows = [
        {
            "type": "instance",
            "source": "instance-7",
            "amount": 0.5,
            "items": [{"type": "gpu", "amount": 0.4}, {"type": "storage", "amount": 0.1}],
        },
        {"type": "instance", "source": "instance-7", "amount": 0.25, "items": []},
        {"type": "volume", "source": "volume-9", "amount": 3.0, "items": []},
        {"type": "instance", "source": "garbled", "amount": 1.0},
    ]
    got = market_by_instance(rows)
    assert set(got) == {7} and abs(got[7].usd - 0.75) < 1e-12
    assert got[7].by_kind == {"gpu": 0.4, "storage": 0.1}


def test_causes_and_tolerance():
    ledger = [
        {
            "instance_id": 1,
            "total_usd": 0.100,
            "gpu_usd": 0.09,
            "storage_usd": 0.01,
            "destroyed_at": 5.0,
        },
        {
            "instance_id": 2,
            "total_usd": 0.50,
            "gpu_usd": 0.45,
            "storage_usd": 0.05,
            "destroyed_at": 5.0,
        },
        {
            "instance_id": 3,
            "total_usd": 0.2,
            "gpu_usd": 0.1,
            "storage_usd": 0.1,
            "destroyed_at": 5.0,
        },
    ]
    market = {
        1: MarketCharge(0.105, {"gpu": 0.095, "storage": 0.01}),  # half a cent: agrees
        2: MarketCharge(0.30, {"gpu": 0.25, "storage": 0.05}),
        4: MarketCharge(0.07, {"gpu": 0.07}),
    }
    r = reconcile(ledger, market)
    by = {d.instance_id: d for d in r.differences}
    assert set(by) == {2, 3, 4}
    assert "GPU" in by[2].cause and "over" in by[2].cause
    assert "does not" in by[3].cause and "never recorded" in by[4].cause
    assert abs(r.ledger_usd - 0.8) < 1e-9 and abs(r.market_usd - 0.475) < 1e-9
    assert "still held" in likely_cause(
        {"total_usd": 0.1, "destroyed_at": None}, MarketCharge(0.5, {})
    )
    # a write-off: one the market bills on is a rental nobody watches; one that came back is
    # named as such (what it did in the gap was unseen)
    written_off = {"total_usd": 0.1, "destroyed_at": 3.0, "written_off": True, "returns": 0}
    assert "nobody watches" in likely_cause(written_off, MarketCharge(0.5, {}))
    # a row unreadable for a while: billed its worst case, named as the upper bound it is
    unread = {"total_usd": 0.5, "destroyed_at": 9.0, "written_off": False, "unread_spells": 1}
    assert "worst case" in likely_cause(unread, MarketCharge(0.1, {}))
    back = {"total_usd": 0.1, "destroyed_at": 9.0, "written_off": False, "returns": 1}
    assert "listed again" in likely_cause(back, MarketCharge(0.2, {"gpu": 0.1}))


def test_an_unreachable_market_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    from rentwatch.ledger import Ledger

    Ledger(tmp_path / "l.duckdb").close()
    monkeypatch.setenv("VAST_API_KEY", "k")
    url = "http://127.0.0.1:9"  # the discard port: nothing listens
    code = main(["reconcile", "--ledger", str(tmp_path / "l.duckdb"), "--market-url", url])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        f"rentwatch: cannot reach the market at {url} (network: connection refused)"
    ]
