"""Snapshot tests of the main views at a fixed size, from a fixed fleet snapshot (no live market,
so the screen is the same on every run). The screen's text is compared with the stored one;
RENTWATCH_UPDATE_SNAPSHOTS=1 rewrites them after an intended change."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import html
import os
import re
import time
from pathlib import Path

import pytest
from rentwatch.views.detail import InstanceDetail, JobLine, LedgerLine, Sample, StatusLine
from rentwatch.views.snapshot import FleetReadout, InstanceSnap
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.footer import fitted
from rentwatch.widgets.messages import FleetSnapshot

from .conftest import played_once
from .ledgers import new_ledger

HERE = Path(__file__).parent / "snapshots"
SIZE = (140, 36)


@pytest.fixture(autouse=True)
def _utc(monkeypatch):
    """Times are drawn in the local zone: pin it, so the screens are the same everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


DETAIL = InstanceDetail(
    instance_id=33775,
    now=5000.0,
    time_scale=30.0,
    gpu_name="RTX 4090",
    machine_id=4405,
    host_id=905,
    phase="verified",
    status="running",
    status_msg="success, running img/ssh",
    created_at=1005.0,
    ended_at=None,
    gpu_dph=0.2,
    storage_dph=0.01,
    gpu_usd=0.1833,
    storage_usd=0.0111,
    bandwidth_usd=0.0,
    preflight={
        "ran": True,
        "ok": True,
        "reason": "",
        "tflops": 118.0,
        "expected": 150.0,
        "name": "NVIDIA GeForce RTX 4090",
        "driver": "550.54.14",
        "cuda": "12.4",
        "backend": "torch",
    },
    status_history=(
        StatusLine(1010.0, "loading", "4c7d45f7c63c: Pulling fs layer"),
        StatusLine(1200.0, "running", "[bold red]x[/] success, running img/ssh"),
    ),
    samples=tuple(
        Sample(
            1300.0 + 30 * k,
            float(40 + k * 3 % 60),
            1900.0 + k,
            2520.0,
            ("hw_slowdown",) if k % 7 == 6 else (),
            mem_used_mb=300.0 + 750 * k,
            mem_total_mb=24576.0,
            temp_c=40.0 + 2 * k,
            power_w=30.0 + 15 * k,
            power_limit_w=450.0,
            fan_pct=30.0 + k,
        )
        for k in range(24)
    ),
    jobs=(
        JobLine("demo-1", "done", 1300.0, 1900.0, 0, ""),
        JobLine("demo-2", "running", 1950.0, None, None, "step 40/100 loss 1.93 [/]"),
    ),
    market_logs=("Status: Downloaded newer image", "\x1b[31mstarted ssh\x1b[0m [link=x]y[/link]"),
    market_logs_error="",
    events=(
        LedgerLine(3, 1005.0, "create", "engine", True, "offer 77 RTX 4090 $0.200/h"),
        LedgerLine(9, 1200.0, "status", "engine", None, "status loading -> running"),
        LedgerLine(14, 1290.0, "preflight_passed", "rule:preflight", True, "118.0 TFLOP/s"),
    ),
)


class StillEngine:
    """The engine's surface the dashboard uses, without an engine: the test sets the fleet."""

    on_snapshot = None
    on_error = None
    ended = None
    end_hint = ""
    outlives_dashboard = False

    def start(self) -> None:
        pass

    def shutdown(self, mode: str = "stop") -> None:
        pass

    def detail(self, instance_id: int, logs: bool = True) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_result(DETAIL)
        return fut


def _inst(i: int, **kw) -> InstanceSnap:
    base = dict(
        instance_id=33770 + i,
        gpu_name="RTX 3090",
        machine_id=4400 + i,
        host_id=900 + i,
        dph=0.21,
        phase="booting",
        status="loading",
        status_msg="4c7d45f7c63c: Downloading 512.0MB/1.9GB",
        status_age_s=70.0,
        freeze_window_s=90.0,
        util=None,
        util_history=(),
        sm_clock=None,
        max_sm_clock=None,
        throttle="",
        billed_usd=0.0123,
        verdict="",
        created_at=1000.0 + i,
        ended_at=None,
        failure_class=None,
        passed_preflight=False,
    )
    base.update(kw)
    return InstanceSnap(**base)


FLEET = FleetReadout(
    now=5000.0,
    campaign="qlora-sweep",
    policy="default",
    fleet=3,
    creates=6,
    max_creates=40,
    instances=(
        _inst(6),
        _inst(
            5,
            gpu_name="RTX 4090",
            phase="working",
            status="running",
            status_msg="success, running img/ssh",
            util=97.0,
            util_history=(10.0, 60.0, 95.0, 97.0, 96.0, 98.0),
            sm_clock=1960.0,
            max_sm_clock=2520.0,
            throttle="SM clock 22% below max under load (hw_slowdown)",
            verdict="118.0 TFLOP/s vs 150 expected",
            passed_preflight=True,
        ),
        _inst(
            4,
            phase="verified",
            status="running",
            status_msg="success, running img/ssh",
            util=3.0,
            util_history=(0.0, 2.0, 3.0),
            sm_clock=210.0,
            max_sm_clock=1950.0,
            verdict="61.2 TFLOP/s vs 64 expected",
            passed_preflight=True,
        ),
        _inst(
            3,
            phase="destroyed",
            status_msg="[bold red]x[/] manifest for img not found",
            failure_class="fatal",
            ended_at=4000.0,
        ),
        _inst(
            2,
            phase="destroyed",
            failure_class="cuda_error",
            status="running",
            verdict="FAILED: preflight failed: RuntimeError: CUDA driver version is insufficient",
            ended_at=3900.0,
        ),
    ),
    quarantined=2,
    duds=2,
    dud_usd=0.0712,
    spent_usd=0.4411,
    verified=2,
    gpu_hours=0.5,
    decisions=(
        "create i:33776 m:4406 RTX 3090 $0.210/h (6/40)",
        "abandon i:33773 m:4403 [fatal] fatal status line: 'manifest for img not found'",
    ),
    decisions_total=2,
    finished=None,
    in_service=2,
    time_scale=30.0,
    budget_usd=5.0,
    dph_now=0.43,
)


def _text(svg: str) -> str:
    rows: dict[float, list[tuple[float, str]]] = {}
    for m in re.finditer(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(m.group(2)), []).append(
            (float(m.group(1)), html.unescape(m.group(3)))
        )
    lines = [
        "".join(t for _, t in sorted(rows[y])).replace("\xa0", " ").rstrip() for y in sorted(rows)
    ]
    return "\n".join(lines) + "\n"


# each view's keys from the fleet; `sorted` changes the fleet's order, so it comes last
VIEWS = {
    "fleet": (),
    "table": ("t",),
    "destroy": ("d",),
    "help": ("?",),
    "detail": ("down", "enter"),
    "sorted": ("o", "o"),
}


async def _settled(app: RentwatchApp, pilot, keys: tuple[str, ...] = ()) -> str:
    """The screen's text once the view `keys` open is up (its screen pushed, or the table's
    header drawn), the footer drawn and two frames alike: a condition, not a fixed wait (a
    loaded box may not have handled the keys, or drawn the footer, yet)."""
    last = None
    for _ in range(600):  # a ceiling for a box stuck for good, not a timing
        text = _text(app.export_screenshot())
        if keys == ("t",):
            up = any(line.startswith(" id ") for line in text.splitlines())
        else:
            up = (len(app.screen_stack) > 1) == (keys not in ((), ("o", "o")))
        ready = "^p palette" in text and fitted(app.screen) and up
        if ready and text == last:
            break
        last = text if ready else None
        await pilot.pause(0.1)
    return text


async def _tour() -> dict[str, str]:
    """Every view's text in one app: each opened from the fleet by its keys, then closed."""
    app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
    seen: dict[str, str] = {}
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(FleetSnapshot(FLEET))
        await pilot.pause(0.3)
        for name, keys in VIEWS.items():
            for k in keys:
                await pilot.press(k)
                await pilot.pause(0.3)
            seen[name] = await _settled(app, pilot, keys)
            await _back_to_fleet(app, pilot, name)
    return seen


async def _back_to_fleet(app: RentwatchApp, pilot, view: str) -> None:
    """Close `view` with escape (and the table with `t`), asserting that it did close."""
    for _ in range(5):
        if len(app.screen_stack) == 1:
            break
        await pilot.press("escape")
        await pilot.pause(0.3)
    assert len(app.screen_stack) == 1, f"escape left {view} open"
    if view == "table":
        await pilot.press("t")  # back to the panes
        await pilot.pause(0.3)


@pytest.mark.parametrize("name", list(VIEWS))
def test_view_snapshot(name, tmp_path_factory):
    # the tour is made once for the run (every worker reads it): each test reads its view
    got = played_once(tmp_path_factory, "snapshot-views", lambda: asyncio.run(_tour()))[name]
    path = HERE / f"{name}.txt"
    if os.environ.get("RENTWATCH_UPDATE_SNAPSHOTS") == "1":
        path.write_text(got)
    # a missing reference is a failure, not a pass: it would compare the screen with itself
    assert path.exists(), (
        f"no reference {path}; inspect the view and set RENTWATCH_UPDATE_SNAPSHOTS=1"
    )
    assert got == path.read_text(), (
        f"{name} view changed; inspect and set RENTWATCH_UPDATE_SNAPSHOTS=1"
    )
    if name == "fleet":
        assert "[bold red]x[/]" in got  # host text shown literally
        assert "unchanged 1m10s / 1m30s" in got
        # the clock's speed after its time: "market clock ×30, market time" took a fifth of 120
        assert "$0.430/h now" in got and "market time " in got and "×30" in got
        assert "$0.441/$5.00" in got
    if name == "detail":
        assert "[bold red]x[/]" in got and "[/]" in got  # host text shown literally
        assert "118.0 TFLOP/s vs 150 expected" in got and "550.54.14" in got
        assert "GPU $0.1833" in got and "storage $0.0111" in got


def test_intents_are_in_the_command_palette():
    async def run() -> list[str]:
        app = RentwatchApp(StillEngine(), new_ledger())  # type: ignore[arg-type]
        async with app.run_test(size=SIZE):
            return [c.title for c in app.get_system_commands(app.screen)]

    titles = asyncio.run(run())
    assert "Destroy the selected instance (asks)" in titles and "Ledger (SQL)" in titles


def test_fleet_keys_do_nothing_behind_another_screen_and_escape_closes_the_filter():
    """On the detail screen `t`, `/` and `o` would change the fleet view hidden under it (and
    `/` moved the focus there); they are off there, in the footer and the palette. Escape in
    the filter box closes it, dropping what was typed but not applied."""

    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            await pilot.press("enter")
            await pilot.pause(0.3)
            assert len(app.screen_stack) == 2
            await pilot.press("t", "o", "slash")
            await pilot.pause(0.3)
            fleet = app.fleet  # the fleet screen, under the detail
            assert not fleet.table_mode and fleet.query_one("FleetView").sort == "new"
            assert not fleet.query_one("#filter").has_class("visible")
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert "Toggle table / pane view" not in titles and "Ledger (SQL)" in titles
            await pilot.press("escape")
            await pilot.pause(0.3)
            assert "Toggle table / pane view" in [
                c.title for c in app.get_system_commands(app.screen)
            ]
            await pilot.press("slash", *"3090", "escape")
            await pilot.pause(0.3)
            box = app.query_one("#filter")
            assert not box.has_class("visible") and box.value == ""
            assert app.query_one("FleetView").filter == "" and app.query_one("FleetView").has_focus

    asyncio.run(run())


def test_ctrl_q_and_the_palettes_quit_ask_like_q():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            await pilot.press("ctrl+q")
            await pilot.pause(0.3)
            assert app.is_running and getattr(app.screen, "purpose", None) == "quit"
            await pilot.press("ctrl+q")  # not a second dialog over the first
            await pilot.pause(0.3)
            assert len(app.screen_stack) == 2
            await pilot.press("escape")
            await pilot.pause(0.3)
            # the palette's quit is ours, read from the q binding (Textual's own is left out)
            quit_cmd = next(
                c for c in app.get_system_commands(app.screen) if c.title == "Quit (asks)"
            )
            await quit_cmd.callback()  # type: ignore[misc]
            await pilot.pause(0.3)
            assert app.is_running and getattr(app.screen, "purpose", None) == "quit"

    asyncio.run(run())


def test_a_spare_at_work_is_not_read_as_more_than_wanted():
    from rentwatch.widgets.render import campaign_bar

    assert "in service 2/3 " in campaign_bar(dataclasses.replace(FLEET, in_service=2)).plain
    bar = campaign_bar(dataclasses.replace(FLEET, in_service=4)).plain
    assert "in service 4 (3 wanted)" in bar and "4/3" not in bar


def test_an_applied_filter_shows_on_the_bar():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            bar = app.query_one("#bar")

            async def shows(cond) -> str:
                # the bar redraws on the app's refresh: wait for it, not for a fixed time
                for _ in range(600):  # a ceiling for a box stuck for good, not a timing
                    if cond(said := str(bar.render())):
                        break
                    await pilot.pause(0.05)
                return said

            said = await shows(lambda t: "qlora-sweep" in t)
            assert "qlora-sweep" in said and "filter:" not in said
            await pilot.press("slash", *"4090", "enter")
            assert "filter: 4090 (/)" in await shows(lambda t: "filter: 4090" in t)
            await pilot.press("slash", "ctrl+u", "enter")  # cleared: the whole fleet again
            assert "filter:" not in await shows(lambda t: "filter:" not in t)

    asyncio.run(run())


def test_instance_keys_do_nothing_where_no_instance_is_in_sight():
    """On the receipt `d` asked to destroy whatever the hidden fleet had selected; on an
    instance's detail screen it asks about that instance."""
    from rentwatch.widgets.detail_screen import DetailScreen
    from rentwatch.widgets.modals import DestroyConfirm

    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            await pilot.press("r")
            await pilot.pause(0.3)
            await pilot.press("d")
            await pilot.pause(0.3)
            assert not isinstance(app.screen, DestroyConfirm)
            await pilot.press("escape")
            await pilot.pause(0.3)
            await pilot.press("down", "enter")
            await pilot.pause(0.3)
            assert isinstance(app.screen, DetailScreen)
            shown = app.screen.instance_id
            await pilot.press("d")
            await pilot.pause(0.3)
            assert isinstance(app.screen, DestroyConfirm)
            assert app.screen.snap.instance_id == shown

    asyncio.run(run())


def test_a_notice_given_before_start_is_said_on_screen():
    """`rentwatch demo` attaching to the demo already running printed so before the
    dashboard covered the terminal: the notice is a toast on the dashboard too."""

    async def run() -> list[str]:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        app.notice = "attached to the controller already running"
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.3)
            return [n.message for n in app._notifications]

    assert any("already running" in m for m in asyncio.run(run()))
