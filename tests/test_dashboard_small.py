"""The smaller things a new user hit (issue 29 item 8): a stopped pane says who stopped it and
why (the market's own line read `Stopped by user` whoever did); a destroyed dud does not read
`running: success`; the help lists every screen's keys; ctrl+a in the ledger editor selects
all; piped `rentwatch ledger` keeps its columns."""

from __future__ import annotations

import asyncio
import dataclasses

from rentwatch.cli.main import main
from rentwatch.core.lifecycle import Phase
from rentwatch.engine.attempt import Attempt
from rentwatch.ledger import Ledger
from rentwatch.views.snapshot import left_why
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.ledger_screen import LedgerScreen
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.modals import quit_choice
from rentwatch.widgets.render import pane_lines
from textual.widgets import RichLog, TextArea

from .ledgers import new_ledger
from .test_snapshots import FLEET, SIZE, StillEngine, _inst, _text


def _attempt(*moves: tuple[Phase, str]) -> Attempt:
    a = Attempt(1, None, 2, 3, "RTX 3090", 0.0, 0.2, 0.01)
    for k, (to, why) in enumerate(moves):
        a.life = a.life.moved(to, 10.0 * (k + 1), why)
        assert a.life.phase == to, to
    return a


def test_why_it_left_service_is_its_first_move_out_since_it_last_came_in():
    dud = _attempt(
        (Phase.BOOTING, "listed"),
        (Phase.RUNNING, "running"),
        (Phase.ABANDONED, "ssh never answered in 10m00s"),
        (Phase.DESTROYED, "due destroy of an abandoned attempt"),
    )
    assert left_why(dud) == "ssh never answered in 10m00s"
    idle = _attempt(
        (Phase.BOOTING, "listed"),
        (Phase.STOPPED, "operator stop"),
        (Phase.BOOTING, "operator start"),
        (Phase.STOPPED, "idle: GPU under 5% for 30m00s"),
    )
    assert left_why(idle) == "idle: GPU under 5% for 30m00s"
    assert left_why(_attempt((Phase.BOOTING, "listed"))) == ""  # in service: nothing to say


def test_a_stopped_pane_says_why_and_a_destroyed_dud_not_running_success():
    stopped = _inst(
        1,
        phase="stopped",
        status="stopped",
        status_msg="Stopped by user",
        ended_at=4000.0,
        left_why="idle: GPU under 5% for 30m00s",
    )
    text = "\n".join(t.plain for t in pane_lines(stopped, False))
    assert "left service: idle: GPU under 5% for 30m00s" in text
    assert "Stopped by user" not in text
    dud = _inst(
        2,
        phase="destroyed",
        status="running",
        status_msg="success, running img/ssh",
        failure_class="ssh_dead",
        ended_at=4000.0,
        left_why="ssh never answered in 10m00s",
    )
    text = "\n".join(t.plain for t in pane_lines(dud, False))
    assert "running: success" not in text and "ssh never answered" in text


def test_the_help_lists_every_screens_keys(tmp_path_factory):
    # the help is read from the bindings of the screen it opens over (test_help_keys.py,
    # whose reading of every screen's help this shares)
    from .test_help_keys import help_keys

    shown = help_keys(tmp_path_factory)
    for key in ("f2", "f3", "f4", "f5", "f6", "ctrl+r", "ctrl+e", "ctrl+a", "ctrl+p"):
        assert key in shown["ledger"], key
    assert "g" in shown["detail"]
    assert {"E", "ctrl+p"} <= shown["fleet"]


def test_the_help_scrolls_at_80x24():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(80, 24)) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            await pilot.press("question_mark")
            await pilot.pause(0.3)
            box = app.screen.query_one("#dialog")
            assert box.max_scroll_y > 0  # more than fits: it must scroll
            await pilot.press("end")
            # the scroll animates: read it once it has arrived, not after a fixed pause (beside
            # four CPU-bound processes it stood at 18.99 of 19)
            await pilot.wait_for_scheduled_animations()
            assert box.scroll_y == box.max_scroll_y

    asyncio.run(run())


def test_a_quit_dialog_that_must_scroll_opens_on_its_question():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(80, 18)) as pilot:  # the dialog taller than that
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            dialog = quit_choice(2, 5, "demo", outlives=True, dph=0.02, end="Ctrl-C")
            app.push_screen(dialog)
            await pilot.pause(0.3)
            await pilot.wait_for_scheduled_animations()
            box = dialog.query_one("#dialog")
            assert box.max_scroll_y > 0  # more than fits
            assert box.scroll_y == 0 and "Quit the dashboard?" in _text(app.export_screenshot())
            assert dialog.focused is not None and dialog.focused.id == "stop"  # Enter stops

    asyncio.run(run())


def test_ctrl_a_in_the_ledger_editor_selects_all():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            await pilot.press("l")
            await pilot.pause(0.5)
            assert isinstance(app.screen, LedgerScreen)
            await pilot.press("ctrl+a", *"select 42 answer")
            await pilot.pause(0.2)
            assert app.screen.query_one("#sql", TextArea).text == "select 42 answer"

    asyncio.run(run())


def test_piped_ledger_output_keeps_readable_columns(tmp_path, capsys):
    path = tmp_path / "l.duckdb"
    Ledger(path).close()
    sql = (
        "select 123456789 as machine_id_of_the_host, 'a failure class name' as "
        "failure_classes_seen_on_it, 0.123456 as dud_usd_in_all, 'x' as a, 'y' as b, "
        "'another long text value here' as comment_on_the_row"
    )
    assert main(["ledger", "--ledger", str(path), sql]) == 0
    out = capsys.readouterr().out
    assert "machine_id_of_the_host" in out and "failure_classes_seen_on_it" in out
    assert "another long text value here" in out and "…" not in out


def test_an_ended_campaigns_bar_still_reads():  # the fleet's `finished` reaches the bar
    from rentwatch.widgets.render import campaign_bar

    done = dataclasses.replace(FLEET, finished="all 6 jobs ended")
    assert "done: all 6 jobs ended" in campaign_bar(done).plain


def test_the_decision_log_wraps_its_lines_again_when_the_terminal_narrows():
    reason = "stop i:33771 by rule:idle: " + " ".join(f"word{i}" for i in range(30))
    snap = dataclasses.replace(FLEET, decisions=(reason,), decisions_total=1)

    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(200, 50)) as pilot:
            app.post_message(FleetSnapshot(snap))
            log = app.screen.query_one("#log", RichLog)
            for _ in range(100):  # written once the snapshot is drawn (later on a loaded box)
                if log.lines:
                    break
                await pilot.pause(0.05)
            await pilot.resize_terminal(80, 24)
            for _ in range(100):
                if log.scrollable_content_region.width < 80:
                    break
                await pilot.pause(0.05)
            await pilot.pause(0.2)
            room = log.scrollable_content_region.width
            assert all(line.cell_length <= room for line in log.lines)
            assert " ".join(" ".join(line.text.split()) for line in log.lines) == reason

    asyncio.run(run())
