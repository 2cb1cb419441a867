"""The End dialog at 80x24: its heading and every rental in sight when it opens (it opened
scrolled, the heading and 2 of 5 rentals off screen); scrolled only where it cannot fit."""

from __future__ import annotations

import asyncio

from rentwatch.ledger.holdings import Holding
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.end_dialog import EndConfirm
from rentwatch.widgets.messages import FleetSnapshot

from .ledgers import new_ledger
from .test_snapshots import FLEET, StillEngine, _text

HELD = [
    Holding(
        33770 + i, 4400 + i, "RTX 4090", i % 2 == 0, i == 3, 0.24, 0.3, 0.5, "train-1" * (i == 0)
    )
    for i in range(5)
]


def _screen(size: tuple[int, int], held: list[Holding]) -> tuple[str, float]:
    async def go() -> tuple[str, float]:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=size) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.2)
            app.push_screen(EndConfirm("qlora-sweep", held))
            # the dialog as it settles (a fixed pause read it half laid out on a loaded box):
            # two samples alike, a tenth of a second apart, once it is on screen
            seen = None
            for _ in range(300):
                await pilot.pause(0.1)
                if not isinstance(app.screen, EndConfirm):
                    continue
                dialog = app.screen.query_one("#dialog")
                now = (_text(app.export_screenshot()), dialog.scroll_y)
                if now == seen and dialog.region.height > 0:
                    break
                seen = now
            assert seen is not None
            return seen

    return asyncio.run(go())


def test_the_end_dialog_shows_its_heading_and_every_rental_at_80x24():
    text, scrolled = _screen((80, 24), HELD)
    assert "End qlora-sweep and destroy everything it holds?" in text
    for h in HELD:
        assert f"i:{h.instance_id} " in text, text
    assert "Cancel" in text and scrolled == 0


def test_a_list_too_long_to_fit_opens_at_its_heading():
    many = [
        Holding(40000 + i, 500 + i, "RTX 3090", False, True, 0.1, 0.0, 0.2, "") for i in range(12)
    ]
    text, scrolled = _screen((80, 24), many)
    assert "End qlora-sweep and destroy everything it holds?" in text and scrolled == 0
