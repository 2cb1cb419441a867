"""Sorting the fleet by a chosen column (a header click, or its number key; again: the other
way, the header's arrow saying which), and the table's columns at 80x24 and 200x50."""

from __future__ import annotations

import asyncio
import dataclasses

from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.fleet import FleetTable, FleetView
from rentwatch.widgets.messages import FleetSnapshot

from .ledgers import new_ledger
from .test_snapshots import FLEET, StillEngine, _inst

WHY = "rule:idle stopped it: GPU idle for 10m00s after its last job (storage bills until destroyed)"
FLEET_SORT = dataclasses.replace(
    FLEET,
    instances=tuple(
        _inst(i, billed_usd=b, status="running", status_msg="", ended_at=None)
        for i, b in ((1, 0.2), (2, 0.9), (3, 0.05), (4, 0.4))
    )
    + (_inst(5, billed_usd=0.1, phase="stopped", ended_at=4000.0, left_why=WHY),),
)


def _ids(table: FleetTable) -> list[int]:
    return [int(str(r.key.value)) for r in table.ordered_rows]


def _header(table: FleetTable) -> str:
    return table.render_line(0).text


async def _settle(app: RentwatchApp, pilot, rows: int) -> FleetTable:
    table = app.query_one(FleetTable)
    for _ in range(50):
        await pilot.pause(0.1)
        if table.row_count == rows:
            break
    return table


def test_a_key_per_column_sorts_the_table_and_again_reverses_it():
    async def go() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(140, 36)) as pilot:
            app.post_message(FleetSnapshot(FLEET_SORT))
            await pilot.press("t")
            table = await _settle(app, pilot, 5)
            key = str(FleetTable.COLUMNS.index("billed") + 1)
            await pilot.press(key)
            await pilot.pause(0.3)
            assert _ids(table) == [33772, 33774, 33771, 33775, 33773]
            assert "billed ▼" in _header(table)
            bar = str(app.query_one("#bar").render())  # `o`, the key, is in the footer
            assert "sort: billed" in bar and "reversed" not in bar
            await pilot.press(key)
            await pilot.pause(0.3)
            assert _ids(table) == [33773, 33775, 33771, 33774, 33772]
            assert "billed ▲" in _header(table)
            assert "sort: billed reversed" in str(app.query_one("#bar").render())
            # the pane view keeps the order chosen in the table
            await pilot.press("t")
            await pilot.pause(0.3)
            view = app.query_one(FleetView)
            assert [s.instance_id for s in view.snaps] == [33773, 33775, 33771, 33774, 33772]

    asyncio.run(go())


def test_a_click_on_a_column_header_sorts_by_it():
    async def go() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(140, 36)) as pilot:
            app.post_message(FleetSnapshot(FLEET_SORT))
            await pilot.press("t")
            table = await _settle(app, pilot, 5)
            x = _header(table).index("billed")
            await pilot.click(FleetTable, offset=(x + 1, 0))
            await pilot.pause(0.3)
            assert app.query_one(FleetView).sort == "billed"
            assert _ids(table)[0] == 33772 and "billed ▼" in _header(table)
            x = _header(table).index("id")
            await pilot.click(FleetTable, offset=(x, 0))
            await pilot.pause(0.3)
            assert _ids(table) == sorted(_ids(table)) and "id ▲" in _header(table)
            assert "billed  " in _header(table)  # the arrow left the column it was on

    asyncio.run(go())


def _table_at(size: tuple[int, int]) -> list[str]:
    async def go() -> list[str]:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=size) as pilot:
            app.post_message(FleetSnapshot(FLEET_SORT))
            await pilot.press("t")
            table = await _settle(app, pilot, 5)
            await pilot.pause(0.3)
            return [table.render_line(y).text for y in range(6)]

    return asyncio.run(go())


def test_the_table_keeps_its_money_columns_at_80x24():
    head, *rows = _table_at((80, 24))
    assert {"util", "throttle", "billed", "$/h"} <= set(head.split()), head
    assert all(len(r.rstrip()) <= 80 for r in rows)
    assert any("0.9000" in r for r in rows)  # a billed figure is in sight


def test_the_status_column_uses_the_width_at_200_columns():
    _, *rows = _table_at((200, 50))
    status = next(r for r in rows if "rule:idle" in r)
    assert WHY in status  # whole: not cut at 28 characters
