"""The fleet filter applies as it is typed (debounced), not only on Enter; Enter keeps it and
closes the box, Escape puts back the filter the box opened on."""

from __future__ import annotations

import asyncio

from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.fleet import FleetView
from rentwatch.widgets.messages import FleetSnapshot

from .ledgers import new_ledger
from .test_snapshots import FLEET, SIZE, StillEngine

ONLY_4090 = [s.instance_id for s in FLEET.instances if s.gpu_name == "RTX 4090"]


def _shown(app: RentwatchApp) -> list[int]:
    return [s.instance_id for s in app.fleet.query_one(FleetView).snaps]


def test_the_fleet_is_filtered_as_the_operator_types():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            every = _shown(app)
            assert len(every) > len(ONLY_4090) == 1
            await pilot.press("slash", *"4090")  # no Enter
            await pilot.pause(0.5)
            box = app.query_one("#filter")
            assert box.has_class("visible") and box.has_focus  # still typing
            assert _shown(app) == ONLY_4090
            assert "filter: 4090 (/)" in str(app.query_one("#bar").render())
            await pilot.press("backspace", "backspace", "backspace", "backspace")
            await pilot.pause(0.5)
            assert _shown(app) == every
            await pilot.press(*"4090", "enter")  # kept, the box closed
            await pilot.pause(0.5)
            assert not box.has_class("visible") and _shown(app) == ONLY_4090
            # Escape puts back what it opened on: the 4090 filter, not what was typed since
            await pilot.press("slash", "ctrl+u", *"3090")
            await pilot.pause(0.5)
            assert ONLY_4090[0] not in _shown(app)
            await pilot.press("escape")
            await pilot.pause(0.5)
            assert _shown(app) == ONLY_4090 and app.fleet.query_one(FleetView).has_focus

    asyncio.run(run())
