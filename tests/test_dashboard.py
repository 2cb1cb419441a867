"""The real dashboard, driven with Pilot against the simulator."""

from __future__ import annotations

import asyncio
import time

import pytest
from rentwatch.sim.rental import Step
from rentwatch.widgets.fleet import FleetView
from rentwatch.widgets.ledger_screen import LedgerScreen

from .conftest import market_stands, played_once


async def _until(pilot, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.1)
    raise AssertionError("condition never met")


def _screen_text(app) -> str:
    view = app.query_one(FleetView)
    return "\n".join(view.render_line(y).text for y in range(view.size.height))


def _live_ids(sim):
    return {
        r["id"]
        for r in sim.call(sim.market.truth)["instances"]
        if r["destroyed_at"] is None and r["actual_status"] != "stopped"
    }


def test_destroy_cancel_confirm_stop_and_quit(make_sim, dashboard):
    sim = make_sim(seed=7, offers=40, time_scale=120)
    app, ledger, engine = dashboard(sim)

    async def run() -> None:
        async with app.run_test(size=(150, 45)) as pilot:
            await _until(
                pilot,
                lambda: (
                    app.latest and len([s for s in app.latest.instances if s.ended_at is None]) >= 2
                ),
            )
            # the market stands through the person's destroy and stop: at 120x a loaded box's
            # second is minutes of it, and the engine's own rules could end an instance before
            # the person's keys reach it
            with market_stands(sim):
                view = app.query_one(FleetView)
                # the snapshot may have come before the table drew it and selected a row
                await _until(pilot, lambda: view.selected_id is not None)
                target = view.selected_id
                # destroy, then Cancel: nothing destroyed
                await pilot.press("d")
                await _until(pilot, lambda: len(app.screen_stack) > 1)
                await pilot.press("enter")  # focus starts on Cancel
                await _until(pilot, lambda: len(app.screen_stack) == 1)
                await pilot.pause(0.5)
                assert target in _live_ids(sim)
                # destroy, type the id, Enter: destroyed, recorded as the human's
                await pilot.press("d")
                await _until(pilot, lambda: len(app.screen_stack) > 1)
                await pilot.click("#typed")
                await pilot.press(*str(target), "enter")
                await _until(pilot, lambda: target not in _live_ids(sim))
                await _until(
                    pilot,
                    lambda: ledger.events(
                        where="kind = 'destroy' AND actor = 'human' AND phase = 'outcome'"
                    ),
                )

                # stop another one (once the panes show the destroyed one as gone)
                def live_other() -> int | None:
                    return next(
                        (
                            i
                            for i, s in enumerate(view.snaps)
                            if s.ended_at is None and s.instance_id != target
                        ),
                        None,
                    )

                await _until(pilot, lambda: live_other() is not None)
                view.cursor = live_other()
                other = view.selected_id
                assert other != target
                await pilot.press("s")

                def asked_or_sent() -> bool:
                    return getattr(app.screen, "purpose", None) == "stop" or bool(
                        ledger.events(where="kind = 'stop' AND actor = 'human'")
                    )

                await _until(pilot, asked_or_sent)  # not a fixed wait: a loaded box is late
                if getattr(app.screen, "purpose", None) == "stop":  # it asks first: answer Stop
                    await pilot.click("#stop")
                await _until(pilot, lambda: other not in _live_ids(sim))
                assert ledger.events(
                    where="kind = 'stop' AND actor = 'human' AND phase = 'outcome' AND ok"
                )
            # quit -> stop all (the default button)
            await pilot.press("q")
            await _until(pilot, lambda: len(app.screen_stack) > 1)
            await pilot.press("enter")
            await _until(pilot, lambda: not app.is_running, timeout=60)

    asyncio.run(run())
    engine.join()  # the controller was asked to stop all: its engine releases, then ends
    assert _live_ids(sim) == set()


def test_ledger_screen_queries_errors_and_refusals(make_sim, dashboard):
    sim = make_sim(seed=7, offers=40, time_scale=120)
    app, ledger, _ = dashboard(sim)

    async def run() -> None:
        async with app.run_test(size=(150, 45)) as pilot:
            await _until(pilot, lambda: app.latest and app.latest.creates >= 1)
            await pilot.press("l")
            await _until(pilot, lambda: isinstance(app.screen, LedgerScreen))
            screen = app.screen
            from textual.widgets import DataTable, Static, TextArea

            await _until(pilot, lambda: screen.result is not None)
            assert "creates" in [
                str(c.label) for c in screen.query_one("#results", DataTable).columns.values()
            ]
            for sql, needle in (
                ("selec nonsense", "query failed"),
                ("DELETE FROM events", "refused"),
            ):
                screen.query_one("#sql", TextArea).text = sql
                await pilot.press("ctrl+r")
                await _until(
                    pilot,
                    lambda n=needle: n in str(screen.query_one("#query-status", Static).render()),
                )
            assert ledger.query("select count(*) from events").rows[0][0] > 0
            await pilot.press("escape")

    asyncio.run(run())


def test_hostile_status_line_renders_literally_and_freeze_timer_ticks(make_sim, dashboard):
    sim = make_sim(
        seed=5,
        offers=10,
        time_scale=30,
        host_class=[{"behaviour": "freeze_pull", "share": 1.0, "freeze_at": [0.05, 0.1]}],
    )
    app, _, _ = dashboard(sim, fleet=1, policy="seed")

    async def run() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await _until(pilot, lambda: app.latest and app.latest.instances)
            iid = app.latest.instances[0].instance_id

            def inject():
                inst = sim.market.instances[iid]
                inst.segments[-1].steps.append(
                    Step(sim.market.clock.now(), "loading", "[bold red]x[/]\x1b[2J\x07")
                )

            sim.call(inject)
            await _until(pilot, lambda: "[bold red]x[/]" in _screen_text(app))
            text = _screen_text(app)
            assert "\x1b" not in text and "\x07" not in text

            def age():
                snap = next(s for s in app.latest.instances if s.instance_id == iid)
                return snap.status_age_s

            first = age()
            await pilot.pause(1.0)
            assert age() > first + 10  # market seconds: the timer counts while the line is frozen
            assert "unchanged" in _screen_text(app)

    asyncio.run(run())


def _both_views(make_sim, dashboard) -> dict[str, str]:
    """The panes' and then the table's SVG of one live dashboard, once three creates are in."""
    sim = make_sim(seed=7, offers=40, time_scale=120)
    app, _, _ = dashboard(sim)
    svgs: dict[str, str] = {}

    async def run() -> None:
        async with app.run_test(size=(150, 45)) as pilot:
            await _until(pilot, lambda: app.latest and app.latest.creates >= 3)
            svgs["panes"] = app.export_screenshot()
            await pilot.press("t")
            await pilot.pause(0.3)
            svgs["table"] = app.export_screenshot()

    asyncio.run(run())
    return svgs


@pytest.mark.parametrize("view", ["panes", "table"])
def test_snapshot_svg(make_sim, dashboard, tmp_path_factory, view):
    """The main views render at a fixed size without errors (SVG written for inspection).
    Both read one dashboard's run, played once for the test run."""
    svg = played_once(tmp_path_factory, "dashboard-svgs", lambda: _both_views(make_sim, dashboard))
    svg = svg[view]
    assert "<svg" in svg and "policy default" in svg.replace("&#160;", " ")


def test_dashboard_never_freezes_under_faults(make_sim, dashboard, monkeypatch):
    """API faults, dropped SSH sessions and a bad day: the UI's loop keeps ticking while the
    engine works in its own thread: no market call and no poll runs on the UI's thread, so
    none can hold it. (How long the UI's worst gap is measures the box running the test: it is
    printed here and measured in bench/tui_bench.py, never asserted.)"""
    import threading

    from rentwatch.engine.supervisor import Supervisor
    from rentwatch.market.vast.transport import Transport

    threads: set[str] = set()
    exchange, poll = Transport._exchange, Supervisor.poll_once

    async def exchange_seen(self, *a, **k):  # type: ignore[no-untyped-def]
        threads.add(threading.current_thread().name)
        return await exchange(self, *a, **k)

    async def poll_seen(self):  # type: ignore[no-untyped-def]
        threads.add(threading.current_thread().name)
        return await poll(self)

    monkeypatch.setattr(Transport, "_exchange", exchange_seen)
    monkeypatch.setattr(Supervisor, "poll_once", poll_seen)
    sim = make_sim(
        seed=13,
        offers=60,
        time_scale=120,
        bad_day=True,
        faults={
            "rate_429": 0.1,
            "rate_5xx": 0.05,
            "rate_timeout": 0.05,
            "rate_malformed": 0.03,
            "ssh_drop": 0.05,
            "timeout_s": 1.5,
        },
    )
    app, _, _ = dashboard(sim, fleet=3, max_wall_poll=0.2)

    async def run() -> float:
        ticks: list[float] = []
        async with app.run_test(size=(150, 45)) as pilot:
            app.set_interval(0.05, lambda: ticks.append(time.monotonic()))
            deadline = time.monotonic() + 12
            while time.monotonic() < deadline:
                await pilot.press("down" if int(time.monotonic() * 2) % 2 else "up")
                await pilot.pause(0.2)
            gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
        assert len(ticks) > 10  # the UI's loop ticked all along
        return max(gaps)

    ui = threading.current_thread().name  # the app's loop runs here, in run_test
    worst = asyncio.run(run())
    print(f"\nworst gap between UI ticks under faults: {worst * 1000:.0f} ms")
    assert threads == {"rentwatch-engine"} and ui != "rentwatch-engine"
    assert sum(sim.api.faults_injected.values()) > 0
