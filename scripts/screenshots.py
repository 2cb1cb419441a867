"""Regenerate screenshots/: the real app against the simulator (seed 7, the article's market),
captured at fixed moments. Run: python scripts/screenshots.py"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rentwatch.core.policy import get_policy
from rentwatch.market.factory import load_campaign
from rentwatch.run.dashboard import DEMO_CAMPAIGN, attach_in_process, make_engine
from rentwatch.sim.scenario import parse_scenario
from rentwatch.sim.server import SimServer
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.detail_screen import DetailScreen
from rentwatch.widgets.fleet import FleetView
from rentwatch.widgets.jobs_screen import JobsScreen

OUT = Path(__file__).resolve().parent.parent / "screenshots"
SIZE = (150, 44)


async def until(pilot, cond, timeout=90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        await pilot.pause(0.1)


@contextlib.contextmanager
def demo_dashboard(tmp: Path) -> Iterator[RentwatchApp]:
    """The dashboard as `demo` runs it, on the article's market, its ledger and key in `tmp`:
    attached to its engine through the controller service; stopped, and the market with it,
    on the way out (tests/test_screenshots_script.py runs this part)."""
    sim = SimServer(
        parse_scenario({"seed": 7, "time_scale": 60, "name": "article"}), api_key="demo"
    ).start_in_thread()
    try:
        engine = make_engine(
            sim.url,
            sim.api_key,
            load_campaign(DEMO_CAMPAIGN, "demo"),
            get_policy("default"),
            tmp / "demo.duckdb",
            tmp / "key",
        )
        app, finish = attach_in_process(engine)
        try:
            yield app
        finally:
            finish("stop")
    finally:
        sim.stop_thread()


async def main() -> None:
    OUT.mkdir(exist_ok=True)
    with demo_dashboard(Path(tempfile.mkdtemp())) as app:
        await capture(app)
    print(f"wrote {', '.join(p.name for p in sorted(OUT.glob('*.svg')))} to {OUT}", file=sys.stderr)


async def capture(app: RentwatchApp) -> None:
    async with app.run_test(size=SIZE) as pilot:
        # the fleet once a host is verified and duds have been thrown out
        await until(
            pilot,
            lambda: app.latest is not None and app.latest.verified >= 2 and app.latest.duds >= 3,
        )
        await pilot.pause(0.5)
        view = app.query_one(FleetView)
        view.cursor = next(
            (i for i, s in enumerate(view.snaps) if s.passed_preflight and s.ended_at is None), 0
        )
        view.refresh()
        await pilot.pause(0.3)
        app.save_screenshot("fleet.svg", str(OUT))
        # the detail of that verified instance, once its figures and the market's logs are in
        await pilot.press("enter")
        await until(
            pilot,
            lambda: (
                isinstance(app.screen, DetailScreen)
                and app.screen.detail is not None
                and not app.screen.logs[1].startswith("asking")
                and len(app.screen.detail.samples) >= 8
            ),
            timeout=60,
        )
        await pilot.pause(0.5)
        app.save_screenshot("detail.svg", str(OUT))
        await pilot.press("escape")
        await pilot.pause(0.3)
        await pilot.press("t")
        await pilot.pause(0.5)
        app.save_screenshot("table.svg", str(OUT))
        await pilot.press("t")
        await pilot.pause(0.3)
        await pilot.press("d")
        await pilot.pause(0.5)
        app.save_screenshot("destroy-confirm.svg", str(OUT))
        await pilot.press("escape")
        await pilot.pause(0.3)
        await pilot.press("E")  # end the campaign: what it holds, listed from the ledger
        await until(pilot, lambda: type(app.screen).__name__ == "EndConfirm", timeout=10)
        await pilot.pause(0.5)
        app.save_screenshot("end-confirm.svg", str(OUT))
        await pilot.press("escape")
        await pilot.pause(0.3)
        await pilot.press("l")
        await pilot.pause(0.3)
        await pilot.press("f3")  # canned query 2: duds by failure class
        await pilot.pause(1.0)
        app.save_screenshot("ledger.svg", str(OUT))
        await pilot.press("escape")
        await pilot.pause(0.3)
        await pilot.press("r")
        await pilot.pause(1.5)
        app.save_screenshot("receipt.svg", str(OUT))
        await pilot.press("escape")
        await pilot.pause(0.3)
        await pilot.press("j")  # the jobs: one running with its progress, the rest queued
        await until(pilot, lambda: isinstance(app.screen, JobsScreen) and bool(app.screen.rows))
        await pilot.pause(2.5)  # a second read: the running job's progress in
        app.save_screenshot("jobs.svg", str(OUT))
        await pilot.press("escape")


if __name__ == "__main__":
    asyncio.run(main())
