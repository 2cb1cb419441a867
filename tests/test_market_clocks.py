"""A ledger holding several markets prices each campaign's live rentals to its own market's
clock (view `campaign_clocks`). The demo's simulated markets each start at the wall clock and
run 30x: a newcomer's second demo was billed $3.68 for a minute of rentals ($0.05 on its own
dashboard), priced up to where the first demo's market had run to."""

from __future__ import annotations

import pytest
from rentwatch.ledger import Ledger

from .ledgers import new_ledger

T0 = 1_800_000_000.0
H = 3600.0


def _campaign(led: Ledger, name: str, market: str, at: float, iid: int, dph: float) -> None:
    led.record(
        "campaign_start",
        at=at,
        actor="engine",
        reason="start",
        campaign=name,
        detail={"market": market},
    )
    s = led.intent(
        "create",
        at=at,
        actor="rule:t",
        reason="r",
        campaign=name,
        gpu_name="RTX 4090",
        machine_id=iid,
        gpu_dph=dph,
        storage_dph=0.0,
    )
    led.outcome(s, at=at, ok=True, instance_id=iid, campaign=name)
    led.record(
        "status",
        at=at + 60,
        actor="market",
        reason="running",
        campaign=name,
        instance_id=iid,
        detail={"status": "running"},
    )


def _usd(led: Ledger, name: str) -> float:
    [r] = led.receipt(name)
    return float(r["total_usd"])


def test_each_markets_campaigns_bill_to_that_markets_clock():
    led = new_ledger()
    # yesterday's demo: its market ran ahead ten hours of market time
    _campaign(led, "demo-1", "http://127.0.0.1:9001", T0, 1, 0.10)
    led.record("note", at=T0 + 10 * H, actor="engine", reason="late", campaign="demo-1")
    # today's demo, on a fresh market whose clock starts back at T0: a quarter hour at $1/h
    _campaign(led, "demo-2", "http://127.0.0.1:9002", T0, 2, 1.00)
    led.tick(T0 + 0.25 * H, "http://127.0.0.1:9002")
    assert _usd(led, "demo-2") == pytest.approx(0.25, rel=1e-3)  # it was $10 before
    assert _usd(led, "demo-1") == pytest.approx(1.0, rel=1e-3)  # ten hours at $0.10
    gpu_h = led.query("SELECT gpu_hours FROM instances WHERE instance_id = 2").rows
    assert gpu_h == [(0.0,)]  # never verified
    led.close()


def test_campaigns_on_one_market_share_its_clock():
    """On the real market every campaign's rentals bill on: one that ended yesterday and left
    a rental running is billed up to today's campaign's clock."""
    led = new_ledger()
    _campaign(led, "old", "https://console.vast.ai", T0, 1, 0.50)
    _campaign(led, "new", "https://console.vast.ai", T0 + 20 * H, 2, 0.40)
    led.tick(T0 + 24 * H, "https://console.vast.ai")
    assert _usd(led, "old") == pytest.approx(12.0, rel=1e-3)
    assert _usd(led, "new") == pytest.approx(1.6, rel=1e-3)
    led.close()


def test_a_ledger_without_markets_keeps_one_clock():
    led = new_ledger()
    s = led.intent(
        "create",
        at=T0,
        actor="rule:t",
        reason="r",
        campaign="c",
        gpu_name="RTX 4090",
        machine_id=1,
        gpu_dph=1.0,
        storage_dph=0.0,
    )
    led.outcome(s, at=T0, ok=True, instance_id=1, campaign="c")
    led.tick(T0 + 2 * H)
    assert _usd(led, "c") == pytest.approx(2.0, rel=1e-3)
    led.close()
