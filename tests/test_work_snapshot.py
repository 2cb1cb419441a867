"""A job that writes its progress shows a bar, an ETA and its host's delivered speed against
its model's in the pane: an SVG snapshot of the fleet view (its text kept in
tests/snapshots/work.txt; RENTWATCH_UPDATE_SNAPSHOTS=1 rewrites it after an intended change)."""

from __future__ import annotations

import asyncio
import dataclasses
import os

from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.footer import fitted
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.render import progress_bar

from .ledgers import new_ledger
from .test_snapshots import FLEET, HERE, SIZE, StillEngine, _text, _utc  # noqa: F401


def _working_fleet():
    rows = list(FLEET.instances)
    i = next(k for k, r in enumerate(rows) if r.phase == "working")
    rows[i] = dataclasses.replace(
        rows[i],
        job="fit-1: step 420/1000 loss 1.93",
        job_progress=0.42,
        job_eta_s=3725.0,
        job_tflops=117.0,
        model_tflops=150.0,
        job_eta_source="progress",
    )
    return dataclasses.replace(FLEET, instances=tuple(rows))


async def _shot(fleet) -> str:
    app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(FleetSnapshot(fleet))
        await pilot.pause(0.3)
        for _ in range(50):
            text = _text(app.export_screenshot())
            if "ETA" in text and "palette" in text and fitted(app.screen):
                break
            await pilot.pause(0.1)
        return text


def test_the_pane_shows_a_jobs_progress_bar_and_eta():
    got = asyncio.run(_shot(_working_fleet()))
    path = HERE / "work.txt"
    if os.environ.get("RENTWATCH_UPDATE_SNAPSHOTS") == "1":
        path.write_text(got)
    assert path.exists(), f"no reference {path}; set RENTWATCH_UPDATE_SNAPSHOTS=1"
    assert got == path.read_text(), (
        "work view changed; inspect and set RENTWATCH_UPDATE_SNAPSHOTS=1"
    )
    assert "work ▕" + progress_bar(0.42) + "▏  42%" in got
    assert "ETA 1h02m" in got
    assert "delivering 117/150 TFLOP/s (78% of its model)" in got


def test_progress_bar_cells():
    assert progress_bar(0.0, 4) == "    "
    assert progress_bar(1.0, 4) == "████"
    assert progress_bar(0.5, 4) == "██  "
    assert len(progress_bar(0.42)) == 20
