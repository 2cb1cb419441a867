"""Pictures (issue 27 item 4): each instance's GPU utilization as a sparkline in its pane, its
history as a chart on the detail screen, and the campaign's spend over time, duds against the
rest, on the receipt screen, drawn from the ledger's billing spans (no store of its own). SVG
snapshots of each, their text kept in tests/snapshots/ (RENTWATCH_UPDATE_SNAPSHOTS=1 rewrites
them after an intended change)."""

from __future__ import annotations

import asyncio
import os

from rentwatch.core.policy import get_policy
from rentwatch.ledger import Ledger
from rentwatch.ledger.readonly import QueryResult
from rentwatch.ledger.screen_reads import SpendPoint, spend_curve_sql
from rentwatch.market.factory import load_campaign
from rentwatch.run.host import run_headless
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.charts import column_chart, resample, stacked_chart
from rentwatch.widgets.footer import fitted
from rentwatch.widgets.messages import FleetSnapshot

from .campaigns import campaign_text
from .ledgers import new_ledger
from .test_snapshots import FLEET, HERE, SIZE, StillEngine, _text, _utc  # noqa: F401

RECEIPT = {
    "campaign": "qlora-sweep",
    "creates": 6,
    "reused": 0,
    "duds": 2,
    "dud_share": 2 / 6,
    "dud_usd": 0.0712,
    "dud_mean_lifetime_min": 11.5,
    "verified": 2,
    "gpu_hours": 0.5,
    "jobs_finished": 1,
    "total_usd": 0.4411,
    "usd_per_gpu_hour": 0.8822,
    "creates_per_gpu_hour": 12.0,
    "by_class": {"fatal": 1, "cuda_error": 1},
    "work_done": 0.0,
    "usd_per_work_hour": None,
    "work_lost_throttle": 0.0,
    "work_lost_host": 0.0,
}


class StillLedger:
    """The ledger's answers for a fixed campaign: a spend curve whose duds come early."""

    def receipt(self, campaign: str | None = None) -> list[dict]:
        return [RECEIPT]

    def query(self, sql: str, limit: int = 10_000, offset: int = 0) -> QueryResult:
        if "billing_spans" in sql:
            n = 100
            rows = []
            for i in range(1, n + 1):
                dud = 0.0712 * min(1.0, i / 40)
                rest = 0.37 * max(0.0, (i - 20) / (n - 20)) ** 1.3
                rows.append((i, 1000.0 + 40 * i, dud, rest))
            return QueryResult(["i", "t", "dud_usd", "other_usd"], rows, False)
        if "ledger_clock" in sql:
            return QueryResult(["now"], [(5000.0,)], False)
        cols = ["machine", "host", "creates", "duds", "p_deliver"]
        return QueryResult(cols, [(4405, 905, 1, 0, 0.6), (4403, 903, 2, 2, 0.2)], False)

    def interrupt(self) -> None:
        pass


def _check(name: str, got: str) -> None:
    path = HERE / f"{name}.txt"
    if os.environ.get("RENTWATCH_UPDATE_SNAPSHOTS") == "1":
        path.write_text(got)
    assert path.exists(), f"no reference {path}; set RENTWATCH_UPDATE_SNAPSHOTS=1"
    assert got == path.read_text(), f"{name} changed; inspect and set RENTWATCH_UPDATE_SNAPSHOTS=1"


async def _shot(keys: tuple[str, ...], ledger=None, size=SIZE) -> tuple[str, str]:
    app = RentwatchApp(StillEngine(), ledger or new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
    async with app.run_test(size=size) as pilot:
        app.post_message(FleetSnapshot(FLEET))
        await pilot.pause(0.3)
        for k in keys:
            await pilot.press(k)
            await pilot.pause(0.4)
        for _ in range(50):  # a loaded machine may not have fitted the footer yet
            if fitted(app.screen):
                break
            await pilot.pause(0.1)
        svg = app.export_screenshot()
        return svg, _text(svg)


def test_the_pane_shows_a_sparkline_of_the_gpus_utilization():
    _, text = asyncio.run(_shot(()))
    assert "GPU  97% ▁▅████" in text and "GPU   3% ▁▁▁" in text


def test_the_detail_screen_charts_the_utilization_history():
    _, text = asyncio.run(_shot(("down", "enter")))  # its snapshot: tests/snapshots/detail.txt
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.lstrip().startswith("100%▕"))
    assert lines[top + 3].lstrip().startswith("0%▕")  # four rows, 0 to 100%
    assert "█" in lines[top + 3] and "utilization, now" in lines[top - 1]


def test_the_receipt_charts_spend_over_time_duds_against_the_rest():
    svg, text = asyncio.run(_shot(("r",), StillLedger()))
    _check("receipt_chart", text)
    assert "spend over time: qlora-sweep" in text and "█ duds" in text
    assert "by 01:23:20: duds $0.0712, the rest $0.3700" in text
    assert "$0.44▕" in text and "$0▕" in text


def test_chart_cells():
    assert resample([1, 2, 3, 4, 5, 6], 3) == [2, 4, 6]  # the last of each bucket
    lines = [t.plain for t in column_chart([0, 50, 100], 8, height=2)]
    # a zero is a dot on the axis (a blank read as the series ending before it)
    assert lines == ["100%▕  █", "  0%▕·██"]
    # an idle host after busy ones: its last samples show, to the right edge of the series
    idle = [t.plain for t in column_chart([97, 97, 0, 0], 9, height=2)]
    assert idle == ["100%▕██  ", "  0%▕██··"]
    rows = stacked_chart([1, 1], [0, 1], 8, height=2)
    assert [t.plain for t in rows] == ["$2.00▕ █", "   $0▕██"]
    # the lower series owns the cells it reaches, the upper one the rest
    assert rows[1].spans[-1].style == "red" and rows[0].spans[-1].style == "green"


def test_the_spend_curve_ends_at_the_receipts_spend(make_sim, tmp_path):
    sim = make_sim(seed=11, offers=40, time_scale=120)
    ledger = tmp_path / "l.duckdb"
    campaign = load_campaign(campaign_text("curve", 2))
    code = asyncio.run(
        run_headless(
            campaign, get_policy("default"), sim.url, sim.api_key, str(ledger),
            key_path=str(tmp_path / "key"),
        )
    )  # fmt: skip
    assert code == 0
    with Ledger(ledger, read_only=True) as led:
        got = led.query(spend_curve_sql("curve", 20), limit=100)
        (receipt,) = led.receipt("curve")
    points = [SpendPoint.from_row(r) for r in got.as_dicts()]
    assert len(points) == 20
    totals = [p.dud_usd + p.other_usd for p in points]
    assert totals == sorted(totals)  # spend only grows
    assert abs(totals[-1] - receipt["total_usd"]) < 1e-9
    assert abs(points[-1].dud_usd - receipt["dud_usd"]) < 1e-9
