"""The demo shows a rental's whole life (it carries short jobs) and never mixes two runs in one
campaign: a ledger that holds an earlier demo gets a fresh campaign name."""

from __future__ import annotations

from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign
from rentwatch.run.dashboard import DEMO_CAMPAIGN, fresh_demo_name


def test_demo_campaign_carries_short_jobs() -> None:
    c = load_campaign(DEMO_CAMPAIGN, "demo")
    assert len(c.jobs) >= 4
    assert all("sleep" in j.run for j in c.jobs)


def test_a_second_demo_run_gets_its_own_campaign(tmp_path) -> None:
    path = tmp_path / "demo.duckdb"
    assert fresh_demo_name(path) == "demo"
    with Ledger(path) as led:
        led.record("campaign_start", at=1.0, actor="engine", reason="x", campaign="demo")
    assert fresh_demo_name(path) == "demo-2"
    with Ledger(path) as led:
        led.record("campaign_start", at=2.0, actor="engine", reason="x", campaign="demo-2")
    assert fresh_demo_name(path) == "demo-3"
