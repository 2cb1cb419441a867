"""scripts/screenshots.py's set-up runs: the demo's market, engine and attached dashboard built
as the script builds them (a changed signature broke it once, unseen until the next render)."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

from rentwatch.ledger import Ledger

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "screenshots.py"


def test_the_screenshots_script_sets_up_the_demo_dashboard(tmp_path):
    spec = importlib.util.spec_from_file_location("screenshots", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    async def run() -> None:
        with script.demo_dashboard(tmp_path) as app:
            async with app.run_test(size=script.SIZE) as pilot:
                await script.until(pilot, lambda: app.latest is not None, timeout=120)
                assert app.latest is not None and app.latest.campaign == "demo"
                assert callable(script.capture)

    asyncio.run(run())
    # the engine's own ledger is the file in `tmp_path` (a Ledger object passed for its path
    # once made a file named after the object's repr in the working folder)
    ledger = Ledger(tmp_path / "demo.duckdb")
    try:
        assert any(e.kind == "campaign_start" for e in ledger.events())
    finally:
        ledger.close()
