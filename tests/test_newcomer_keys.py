"""Keys a newcomer pressed in tmux (issue 29): `a` on a host at work said "started" while the
engine wrote an illegal move (verified -> booting) into the ledger; it starts only a stopped
rental now, and says why not otherwise. `E` after the demo had finished said "it held nothing"
and left its stopped rentals billing storage."""

from __future__ import annotations

import asyncio
import dataclasses

from rentwatch.engine.intents import StartIntent, StopIntent
from rentwatch.ledger.holdings import Holding
from rentwatch.market.factory import load_campaign
from rentwatch.run.dashboard import attach_in_process
from rentwatch.views.acts import left_after_end
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.end_dialog import EndConfirm
from rentwatch.widgets.messages import FleetSnapshot
from textual.widgets import Input

from .campaigns import campaign_text, engine_stands, stepped_engine
from .ledgers import new_ledger
from .test_dashboard import _until
from .test_dashboard_end import _billing, _typed
from .test_selection_keys import Recorder, recording_app
from .test_snapshots import FLEET, SIZE


def test_start_sends_nothing_for_a_running_host_and_starts_a_stopped_one():
    engine = Recorder()
    rows = list(FLEET.instances)
    rows[2] = dataclasses.replace(rows[2], phase="stopped", ended_at=4000.0)
    fleet = dataclasses.replace(FLEET, instances=tuple(rows))

    async def run() -> list[str]:
        app, said = recording_app(engine)
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(fleet))
            await pilot.pause(0.3)
            await pilot.press("down")  # the host at work
            await pilot.pause(0.2)
            await pilot.press("a")
            await pilot.pause(0.3)
            assert engine.sent == []
            await pilot.press("down")  # the stopped one
            await pilot.pause(0.2)
            await pilot.press("a")
            await pilot.pause(0.3)
        assert engine.sent == [StartIntent(rows[2].instance_id)]
        return said

    said = asyncio.run(run())
    assert f"{rows[1].instance_id} is working: nothing to start" in " ".join(said)


def test_end_from_the_dashboard_destroys_a_stopped_rental_too(make_sim, tmp_path):
    """The end's dialog lists stopped rentals (their storage bills); once the name is typed
    they are destroyed as well: after a finished demo, E said "it held nothing" and its four
    stopped rentals went on billing. On the market's stepped clock, standing while the keys go
    in (tests/test_dashboard_end.py says why)."""
    sim = make_sim(seed=7, offers=40, stepped=True)
    ledger_path = tmp_path / "l.duckdb"
    campaign = load_campaign(campaign_text("endstop", 2))
    engine = stepped_engine(sim, campaign, ledger_path, tmp_path / "key")
    app, finish = attach_in_process(engine)

    async def run() -> int:
        async with app.run_test(size=(120, 36)) as pilot:
            await _until(pilot, lambda: app.latest and app.latest.verified >= 1, timeout=120)
            with engine_stands(engine):
                iid = next(s.instance_id for s in app.latest.instances if s.passed_preflight)
                app.engine.submit(StopIntent(iid)).result(timeout=30)
                await _until(pilot, lambda: _billing(sim).get(iid) == "stopped", timeout=30)
                await pilot.press("E")
                await _until(pilot, lambda: isinstance(app.screen, EndConfirm))
                dialog = app.screen
                assert isinstance(dialog, EndConfirm)
                assert iid in {h.instance_id for h in dialog.held}
                await _typed(pilot, dialog, campaign.name)
                await pilot.press("enter")
                await _until(pilot, lambda: engine.session.sup.ended_by is not None)
            await _until(pilot, lambda: not _billing(sim), timeout=120)
            return iid

    try:
        iid = asyncio.run(run())
        destroys = engine.session.ledger.events(
            where="kind = 'destroy' AND phase = 'outcome' AND ok"
        )
    finally:
        app.engine.shutdown("leave")
        finish("stop")
    assert not _billing(sim)
    assert iid in {e.instance_id for e in destroys}
    assert {e.actor for e in destroys} == {"human"}


def test_what_an_end_left_is_what_it_did_not_destroy():
    held = [Holding(i, 1, "RTX 3090", True, True, 0.2, 0.2, 0.1, "") for i in (11, 12, 13)]
    assert left_after_end(held, (11,)) == (12, 13)  # i:12 was stopped already: not destroyed
    assert left_after_end(held, (111,)) == (11, 12, 13)


def test_stop_on_a_stopped_host_says_why_not():
    # an outsider's pass: `s` on a stopped host said "stopped ID" and wrote nothing
    engine = Recorder()
    rows = list(FLEET.instances)
    rows[1] = dataclasses.replace(rows[1], phase="stopped", ended_at=4000.0)
    fleet = dataclasses.replace(FLEET, instances=tuple(rows))

    async def run() -> list[str]:
        app, said = recording_app(engine)
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(fleet))
            await pilot.pause(0.3)
            await pilot.press("down", "s")
            await pilot.pause(0.3)
        assert engine.sent == []
        return said

    said = " ".join(asyncio.run(run()))
    assert f"{rows[1].instance_id} is stopped already: nothing to stop" in said


def test_a_name_typed_as_the_end_dialog_opens_is_typed_whole():
    # loaded, the dashboard end test typed the name as soon as the dialog was the screen,
    # before its field had the focus: "qlora" went in as "ora", and nothing ended
    async def run() -> str:
        app = RentwatchApp(Recorder(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.2)
            app.push_screen(EndConfirm("qlora", []))
            await pilot.press(*"qlora")
            return app.screen.query_one(Input).value

    assert asyncio.run(run()) == "qlora"
