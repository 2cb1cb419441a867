"""Keys and dialogs that must do what they say, without a market: the destroy dialog takes the
typed id where the prompt says, a wrong id says why nothing happened, `x` asks before leaving
the fleet unwatched, and the table view honours the filter like the panes."""

from __future__ import annotations

import dataclasses

from rentwatch.cli.main import build_parser
from rentwatch.views.snapshot import InstanceSnap
from rentwatch.widgets.fleet import FleetTable, FleetView, visible
from rentwatch.widgets.modals import DestroyConfirm, detach_choice, quit_choice
from textual.app import App, ComposeResult
from textual.widgets import Input, Static

SNAP = InstanceSnap(
    instance_id=4242,
    gpu_name="RTX 4090",
    machine_id=77,
    host_id=5,
    dph=0.3,
    phase="verified",
    status="running",
    status_msg="",
    status_age_s=30.0,
    freeze_window_s=None,
    util=90.0,
    util_history=(),
    sm_clock=None,
    max_sm_clock=None,
    throttle="",
    billed_usd=0.12,
    verdict="",
    created_at=0.0,
    ended_at=None,
    failure_class=None,
    passed_preflight=True,
)


class _Host(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.results: list[object] = []


async def test_destroy_dialog_takes_the_typed_id_without_tabbing() -> None:
    app = _Host()
    async with app.run_test() as pilot:
        app.push_screen(DestroyConfirm(SNAP, (4242, 4250)), app.results.append)
        await pilot.pause()
        await pilot.press(*"4242", "enter")
        await pilot.pause()
    assert app.results == ["4242"]


async def test_destroy_dialog_wrong_id_says_why_and_stays_open() -> None:
    app = _Host()
    async with app.run_test() as pilot:
        app.push_screen(DestroyConfirm(SNAP, (4242, 4250)), app.results.append)
        await pilot.pause()
        await pilot.press(*"4243", "enter")
        await pilot.pause()
        assert app.results == []  # still open: nothing destroyed, nothing cancelled silently
        assert isinstance(app.screen, DestroyConfirm)
        said = app.screen.query_one("#refused", Static)
        assert said.display  # in the dialog, where the operator looks, not in a toast
        assert "4243 is not one of the campaign's rentals: nothing destroyed" in str(said.render())
        assert app.screen.query_one("#typed", Input).value == ""
        await pilot.press(*"4250", "enter")
        await pilot.pause()
        assert "4250 is another of the campaign's rentals, not the one selected" in str(
            said.render()
        )
        await pilot.press(*"x!", "enter")
        await pilot.pause()
        assert "'x!' is not 4242: nothing destroyed" in str(said.render())
        await pilot.press("enter")  # empty box: a cancel
        await pilot.pause()
    assert app.results == [None]


async def test_detach_asks_and_cancel_is_the_default() -> None:
    app = _Host()
    async with app.run_test() as pilot:
        app.push_screen(detach_choice(3), app.results.append)
        await pilot.pause()
        await pilot.press("enter")  # a stray Enter after a stray x: Cancel has the focus
        await pilot.pause()
    assert app.results == [None]


async def test_quit_says_what_each_button_does() -> None:
    # attached to a controller of its own: stop it, or leave it running (and how to come back)
    app = _Host()
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(quit_choice(2, 0, "qlora", outlives=True), app.results.append)
        await pilot.pause()
        text = str(app.screen.query("Static").first().render())
        assert "stops verified instances, destroys the rest" in text
        assert "keeps supervising in the background" in text
        assert "rentwatch attach --campaign qlora" in text and "Cancel" in text
        await pilot.press("enter")  # Stop has the focus after q
        await pilot.pause()
        app.push_screen(quit_choice(2, 0, "qlora", True, focus="leave"), app.results.append)
        await pilot.pause()
        await pilot.press("enter")  # after x: Leave running has the focus
        await pilot.pause()
        app.push_screen(quit_choice(2, 0, "qlora", True), app.results.append)
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        # the engine inside this process ends with it: stop all, or detach the fleet
        app.push_screen(quit_choice(2), app.results.append)
        await pilot.pause()
        text = str(app.screen.query("Static").first().render())
        assert "ends with this dashboard" in text and "unsupervised" in text
        await pilot.press("tab", "enter")
        await pilot.pause()
    assert app.results == ["stop", "leave", None, "detach"]


class _TableHost(App[None]):
    def compose(self) -> ComposeResult:
        yield FleetTable()


async def test_table_view_honours_the_filter_and_freezes_dead_ages() -> None:
    dead = dataclasses.replace(
        SNAP,
        instance_id=5151,
        gpu_name="RTX 3070",
        phase="destroyed",
        status="loading",
        status_age_s=7300.0,
        ended_at=100.0,
    )
    snaps = (SNAP, dead)
    assert [s.instance_id for s in visible(snaps, 200.0, "3070")] == [5151]
    assert [s.instance_id for s in visible(snaps, 200.0, "")] == [4242, 5151]
    assert [s.instance_id for s in visible(snaps, 100.0 + 3600, "")] == [4242]  # faded
    app = _TableHost()
    async with app.run_test() as pilot:
        table = app.query_one(FleetTable)
        table.show(visible(snaps, 200.0, "3070"))
        await pilot.pause()
        assert table.row_count == 1
        row = table.get_row("5151")
        # no age that keeps growing after the end
        assert row[FleetTable.COLUMNS.index("status")] == "loading"


def test_a_stopped_rental_never_folds_away() -> None:
    """A stopped rental bills storage until destroyed: it stays on the dashboard (to be
    destroyed or started), however long ago it stopped; destroyed ones fold away."""
    stopped = dataclasses.replace(SNAP, instance_id=6, phase="stopped", ended_at=100.0)
    gone = dataclasses.replace(SNAP, instance_id=7, phase="destroyed", ended_at=100.0)
    later = 100.0 + 3600
    assert [s.instance_id for s in visible((stopped, gone), later, "")] == [6]


async def test_an_empty_fleet_view_says_why() -> None:
    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield FleetView()

    gone = dataclasses.replace(SNAP, phase="destroyed", ended_at=100.0)
    app = Host()
    async with app.run_test():
        view = app.query_one(FleetView)
        assert "no instances yet" in view.empty_text()
        view.show((gone,), 100.0 + 3600)
        assert "fold away" in view.empty_text()
        view.filter = "h100"
        view.show((SNAP,), 200.0)
        assert not view.snaps and "matches the filter 'h100'" in view.empty_text()


def test_top_level_help_lists_every_command() -> None:
    text = build_parser().format_help()
    for name in ("demo", "watch", "sim", "run", "referee", "scenario", "receipt", "ledger"):
        assert f"    {name} " in text, name


def test_a_host_whose_last_sample_works_is_shown_working_not_idle() -> None:
    """The market's utilization lags the host's own NVML sample: a job at 97% is `working`."""
    from rentwatch.core.lifecycle import Phase
    from rentwatch.engine.attempt import Attempt
    from rentwatch.views.snapshot import shown_phase

    a = Attempt(
        instance_id=1,
        offer=None,
        machine_id=2,
        host_id=3,
        gpu_name="RTX 3060",
        created_at=0.0,
        gpu_dph=0.1,
        storage_dph=0.01,
        status_since=0.0,
    )
    for to in (Phase.BOOTING, Phase.RUNNING, Phase.VERIFIED):
        a.life = a.life.moved(to, 1.0, "test")
    a.util_low_since = 5.0  # the market's list said 0%
    a.samples.append({"util": 97.0})
    assert shown_phase(a) == "working"
    a.samples.append({"util": 2.0})
    assert shown_phase(a) == "idle"


async def test_a_cleared_filter_brings_rows_back_in_order_and_drawn() -> None:
    """`/ 3060 Enter`, then clearing the filter: the rows that came back were appended at the
    end, out of the sort the bar names. j/k move the cursor as in the pane view."""
    snaps = tuple(
        dataclasses.replace(SNAP, instance_id=100 + i, gpu_name="RTX 3060" if i % 2 else "A100")
        for i in range(8)
    )
    app = _TableHost()
    async with app.run_test(size=(120, 30)) as pilot:
        table = app.query_one(FleetTable)
        table.show(visible(snaps, 200.0, ""))
        await pilot.pause()
        table.show(visible(snaps, 200.0, "3060"))
        await pilot.pause()
        table.show(visible(snaps, 200.0, ""))
        await pilot.pause()
        want = [str(s.instance_id) for s in visible(snaps, 200.0, "")]
        assert [r.key.value for r in table.ordered_rows] == want
        drawn = [table.render_line(y).text for y in range(1, 1 + len(want))]
        assert [line.split()[0] for line in drawn] == want, drawn
        table.focus()
        await pilot.press("down", "down")
        assert table.cursor_row == 2
        await pilot.press("up")
        assert table.cursor_row == 1


def test_a_stopped_rentals_last_throttle_is_not_shown_as_now() -> None:
    from rentwatch.widgets.render import pane_lines

    hot = dataclasses.replace(SNAP, throttle="SM clock 30% below max (hw_slowdown)")
    assert "30% below max" in pane_lines(hot, False)[2].plain
    stopped = dataclasses.replace(hot, phase="stopped", ended_at=100.0)
    gpu = pane_lines(stopped, False)[2].plain
    assert "below max" not in gpu and "throttle: -" in gpu
    assert FleetTable._row(stopped)[FleetTable.COLUMNS.index("throttle")] == "-"
