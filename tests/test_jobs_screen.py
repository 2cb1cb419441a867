"""The jobs screen (`j`): every job of the campaign with its state, host, progress, ETA, dollars
and tries; Enter follows the selected job's output, cleaned; each screen owns its keys."""

from __future__ import annotations

import asyncio
import concurrent.futures

from rentwatch.views.jobs import JobOutput, JobRow, cells
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.jobs_screen import JobOutputScreen, JobsScreen
from rentwatch.widgets.messages import FleetSnapshot
from textual.widgets import DataTable

from .test_snapshots import FLEET, StillEngine

ROWS = [
    JobRow("train-1", "done", 7, "RTX 4090 m:77", 1.0, 0.0, 0.0412, 1),
    JobRow("train-2", "running", 8, "RTX 3090 m:78", 0.42, 12.5, 0.0203, 2, eta_estimated=True),
    JobRow("train-3", "pending", None, "", None, None, 0.0, 0),
]


def _done(value: object) -> concurrent.futures.Future:
    fut: concurrent.futures.Future = concurrent.futures.Future()
    fut.set_result(value)
    return fut


class JobsEngine(StillEngine):
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.reads = 0

    def jobs(self) -> concurrent.futures.Future:
        return _done(list(ROWS))

    def job_log(self, name: str) -> concurrent.futures.Future:
        self.asked.append(name)
        self.reads += 1
        text = "".join(f"step {i}\n" for i in range(self.reads)) + "\x1b]0;owned\x07\x1b[2Jok\n"
        return _done(JobOutput(name, text, "its host i:8", True))


def test_j_lists_the_jobs_and_enter_follows_one(monkeypatch):
    monkeypatch.setattr("rentwatch.widgets.jobs_screen.REFRESH_S", 0.2)
    engine = JobsEngine()
    app = RentwatchApp(engine, None, refresh_s=0.05)  # type: ignore[arg-type]

    async def run() -> None:
        async with app.run_test(size=(120, 36)) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            await pilot.press("j")
            await pilot.pause(0.5)
            screen = app.screen
            assert isinstance(screen, JobsScreen)
            table = screen.query_one(DataTable)
            assert table.row_count == 3
            cells = [[str(c) for c in table.get_row_at(i)] for i in range(3)]
            assert cells[0][:2] == ["train-1", "done"] and "100%" in cells[0][3]
            assert cells[1][1] == "running" and cells[1][2] == "i:8 RTX 3090 m:78"
            assert "42%" in cells[1][3] and cells[1][4] == "~12m30s" and cells[1][5] == "$0.0203"
            assert cells[2][1:5] == ["pending", "-", "-", "-"]
            head = str(screen.query_one("#jobs-head").render())
            assert "3 in all" in head and "running 1" in head and "$0.0615 so far" in head
            await pilot.press("down", "enter")
            await pilot.pause(0.6)
            out = app.screen
            assert isinstance(out, JobOutputScreen) and engine.asked[0] == "train-2"
            reads = engine.reads
            await pilot.pause(0.6)
            assert engine.reads > reads  # followed: asked again while it is on its host
            text = str(out.query_one("#output-text").render())
            assert "step 1" in text and "ok" in text
            assert "\x1b" not in text and "owned" not in text
            assert "following" in str(out.query_one("#output-head").render())
            await pilot.press("escape")
            await pilot.pause(0.3)
            assert isinstance(app.screen, JobsScreen)
            await pilot.press("escape")
            await pilot.pause(0.3)
            assert not isinstance(app.screen, JobsScreen | JobOutputScreen)

    asyncio.run(run())


def test_a_job_that_is_over_shows_no_time_left():
    def eta(state: str, eta_min: float | None) -> str:
        return cells(JobRow("j", state, 7, "RTX 4090", 1.0, eta_min, 0.1, 1))[4]

    assert [eta("done", 0.0), eta("failed", 3.0), eta("pending", None)] == ["-", "-", "-"]
    assert eta("running", 12.0) == "12m00s"


def test_j_on_a_jobs_output_goes_back_to_the_jobs():
    """The output screen's footer names `j Jobs`: it leads back to the list it was opened from."""
    engine = JobsEngine()
    app = RentwatchApp(engine, None, refresh_s=0.05)  # type: ignore[arg-type]

    async def run() -> None:
        async with app.run_test(size=(120, 36)) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            await pilot.press("j")
            await pilot.pause(0.3)
            await pilot.press("enter")
            await pilot.pause(0.3)
            assert isinstance(app.screen, JobOutputScreen)
            await pilot.press("j")
            await pilot.pause(0.3)
            assert isinstance(app.screen, JobsScreen)

    asyncio.run(run())
