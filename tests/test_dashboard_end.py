"""A clean end from the dashboard: `E` lists what the campaign holds (from the ledger, as
`rentwatch end` does) and, once the campaign's name is typed, ends it and destroys all of it,
verified rentals included, as the person's act; after the end the footer no longer offers what
an ended campaign refuses, and quitting says what keeps billing and how to end it."""

from __future__ import annotations

import asyncio
import dataclasses

from rentwatch.engine.intents import EndIntent, StopIntent
from rentwatch.ledger.holdings import Holding
from rentwatch.market.factory import load_campaign
from rentwatch.run.dashboard import attach_in_process
from rentwatch.run.service import api
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.end_dialog import EndConfirm, holdings_text
from rentwatch.widgets.footer import fitted
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.modals import ChoiceScreen
from textual.widgets import Input

from .campaigns import campaign_text, engine_stands, stepped_engine
from .ledgers import new_ledger
from .test_dashboard import _until
from .test_snapshots import FLEET, SIZE, StillEngine, _text


async def _typed(pilot, dialog: EndConfirm, text: str) -> None:
    """`text` typed into the dialog's field once the dialog is composed and its field has the
    focus (the screen is the dialog before either), and waited for until the field shows it."""
    await _until(pilot, lambda: any(f.has_focus for f in dialog.query(Input)))
    field = dialog.query_one(Input)
    await pilot.press(*text)
    await _until(pilot, lambda: field.value == text)


def _footer(app) -> str:
    return _text(app.export_screenshot()).splitlines()[-1]


def _toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def _billing(sim) -> dict[int, str]:
    return {
        r["id"]: r["actual_status"]
        for r in sim.call(sim.market.truth)["instances"]
        if r["destroyed_at"] is None
    }


def test_the_end_intent_travels_to_the_controller_as_its_own():
    for intent in (EndIntent(True, "qlora"), StopIntent(5)):
        assert api.intent_from_json(api.intent_to_json(intent)) == intent


def test_the_end_dialog_lists_verified_unpulled_and_storage():
    held = [
        Holding(11, 7, "RTX 4090", True, False, 0.24, 0.3, 0.5, "train-1 (running)"),
        Holding(12, 8, "RTX 3090", False, True, 0.12, 0.2, 0.1, ""),
    ]
    text = holdings_text("qlora", held).plain
    assert "It holds 2 rental(s): 1 verified, 1 never verified, 1 with outputs not pulled off" in (
        text
    )
    assert "storage $0.360/day in all, GPUs $0.300/h" in text
    assert "i:11 m:7 RTX 4090: VERIFIED" in text and "outputs NOT pulled off: train-1" in text
    assert "Type the campaign's name (qlora)" in text


def test_end_from_the_dashboard_destroys_everything_through_the_controller(make_sim, tmp_path):
    """The dashboard as `demo` and `watch` run it: a client of the controller API. Its engine
    runs on the market's stepped clock, and the market stands while the person's keys go in:
    wall-paced at 120x, a loaded box had healthy hosts judged dead and destroyed by rule."""
    sim = make_sim(seed=7, offers=40, stepped=True)
    ledger_path = tmp_path / "l.duckdb"
    campaign = load_campaign(campaign_text("endme", 2))
    engine = stepped_engine(sim, campaign, ledger_path, tmp_path / "key")
    app, finish = attach_in_process(engine)
    assert isinstance(app, RentwatchApp)

    async def run() -> None:
        async with app.run_test(size=(120, 36)) as pilot:
            await _until(pilot, lambda: app.latest and app.latest.verified >= 1, timeout=120)
            with engine_stands(engine):
                await pilot.press("E")
                await _until(pilot, lambda: isinstance(app.screen, EndConfirm))
                dialog = app.screen
                assert isinstance(dialog, EndConfirm) and dialog.held
                assert any(h.verified for h in dialog.held)
                await _typed(pilot, dialog, "wrong")
                await pilot.press("enter")  # not the name: nothing ends
                await _until(pilot, lambda: dialog.query_one(Input).value == "")  # refused
                assert isinstance(app.screen, EndConfirm) and _billing(sim)
                await _typed(pilot, dialog, campaign.name)
                await pilot.press("enter")
                await _until(pilot, lambda: engine.session.sup.ended_by is not None)
            await _until(pilot, lambda: not _billing(sim), timeout=120)
            await _until(pilot, lambda: app.latest.finished is not None)
            # the footer redrawn for the ended campaign (a loaded box draws it later)
            await _until(pilot, lambda: fitted(app.screen) and "Create" not in _footer(app))
            footer = _footer(app)
            assert "Create" not in footer and "Stop" in footer and "Destroy" in footer
            # the fleet screen owns these keys: it refuses what would set automation going
            assert app.fleet.check_action("create", ()) is False
            assert app.fleet.check_action("stop", ()) is True
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert "Create one more instance" not in titles
            assert "Stop the selected instance (may ask)" in titles
            await pilot.press("plus")  # a refused key says why, where it would say nothing
            await _until(pilot, lambda: "has ended" in str(_toasts(app)))
            assert "takes over nothing new" in _toasts(app)[-1]

    try:
        asyncio.run(run())
        destroys = engine.session.ledger.events(
            where="kind = 'destroy' AND phase = 'outcome' AND ok"
        )
    finally:
        app.engine.shutdown("leave")  # the client first: the app that heard it has gone
        finish("stop")
    assert not _billing(sim)
    assert destroys and {e.actor for e in destroys} == {"human"}


def test_quitting_says_what_keeps_billing_and_how_to_end_it():
    stopped = dataclasses.replace(FLEET.instances[2], phase="stopped")
    fleet = dataclasses.replace(FLEET, instances=(*FLEET.instances[:2], stopped))

    async def run() -> str:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(fleet))
            await pilot.pause(0.3)
            await pilot.press("q")
            await pilot.pause(0.3)
            assert isinstance(app.screen, ChoiceScreen)
            # centred as the other dialogs are
            box = app.screen.query_one("#dialog").region
            assert abs(box.x - (SIZE[0] - box.right)) <= 1 and box.y > 0
            return app.screen.text

    text = asyncio.run(run())
    assert "Billing now: $0.430/h" in text and "bill storage until they are destroyed" in text
    assert "E (end the campaign and destroy everything)" in text
    assert "rentwatch end --campaign qlora-sweep --destroy" in text
