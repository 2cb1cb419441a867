"""The instance detail screen against the simulator, attached over the controller's socket;
and the supervision basics around it (sort, bulk destroy of stopped duds, storage counted in the
leave dialogs, canned ledger queries without ctrl+digit, timestamps in the ledger's views)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
from rentwatch.core.policy import get_policy
from rentwatch.engine.intents import Reply
from rentwatch.market.factory import load_campaign
from rentwatch.run.dashboard import make_engine
from rentwatch.run.service.remote import ControllerClient, RemoteEngine
from rentwatch.views.detail import InstanceDetail, Sample
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.detail_screen import DetailScreen, render_gpu
from rentwatch.widgets.fleet import FleetView, visible
from rentwatch.widgets.fleet_screen import FleetScreen
from rentwatch.widgets.ledger_screen import CANNED, LedgerScreen, canned_key
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.modals import BulkDestroyConfirm, ChoiceScreen

from .campaigns import campaign_text
from .ledgers import new_ledger
from .test_dashboard_keys import SNAP
from .test_snapshots import FLEET, StillEngine


async def _until(pilot, cond, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"{what} never met")


def test_detail_screen_shows_one_instance_in_depth(make_sim, tmp_path, runtime):
    from rentwatch.run.dashboard import attach_in_process

    sim = make_sim(seed=7, offers=40, time_scale=120)
    path = tmp_path / "l.duckdb"
    engine = make_engine(
        sim.url,
        sim.api_key,
        load_campaign(campaign_text("tui", 2)),
        get_policy("default"),
        path,
        tmp_path / "key",
    )
    app, finish = attach_in_process(engine)
    assert isinstance(app.engine, RemoteEngine)

    async def drive() -> None:
        async with app.run_test(size=(150, 50)) as pilot:

            def proven():
                snap = app.fleet.latest  # the one the fleet screen has heard
                return snap and any(
                    s.passed_preflight and s.util is not None and s.ended_at is None
                    for s in snap.instances
                )

            await _until(pilot, proven, 90, "a proven instance with samples")
            app.fleet.redraw()
            view = app.query_one(FleetView)
            target = next(s for s in view.snaps if s.passed_preflight and s.util is not None)
            # down to the last row, then up to the first, and so on: polls landing meanwhile
            # may move the row above the cursor, where pressing down forever never reached it
            key = "down"
            for _ in range(200):
                if view.selected_id == target.instance_id:
                    break
                before = view.selected_id
                await pilot.press(key)
                if view.selected_id == before:
                    key = "up" if key == "down" else "down"
            assert view.selected_id == target.instance_id, "the proven row was never selected"
            await pilot.press("enter")
            await _until(pilot, lambda: isinstance(app.screen, DetailScreen), 30, "detail open")
            screen = app.screen
            assert isinstance(screen, DetailScreen)
            await _until(
                pilot,
                lambda: screen.detail is not None and not screen.logs[1].startswith("asking"),
                30,
                "the detail and the market's logs",
            )
            d = screen.detail
            assert d is not None and d.instance_id == target.instance_id
            # the preflight document: the speed against the model's, what the host said it is
            assert d.preflight["ok"] is True and d.preflight["tflops"] > 0
            assert d.preflight["expected"] and d.preflight["name"]
            assert d.samples and d.samples[-1].max_sm_clock
            # its vital signs, carried whole through the controller too
            last = d.samples[-1]
            assert last.mem_total_mb and last.mem_used_mb is not None
            assert last.temp_c and last.power_w and last.power_limit_w
            assert [s.status for s in d.status_history][-1] == "running"
            kinds = {e.kind for e in d.events}
            assert {"create", "status", "preflight_passed"} <= kinds
            # the market's own logs, fetched through the engine (the sim logs the image pull)
            assert screen.logs[1] == "" and screen.logs[0], screen.logs
            # money split GPU/storage, the same billing as the fleet's figure for it
            latest = app.latest
            snap = next(s for s in latest.instances if s.instance_id == d.instance_id)
            assert d.gpu_usd > 0 and d.storage_usd > 0
            # read at two market moments (minutes apart on a loaded box at 120x): the same
            # billing, up to what the rental billed between them
            between = (d.dph_now or 0.0) * abs(d.now - latest.now) / 3600
            assert abs(d.total_usd - snap.billed_usd) < 0.01 + between
            shown = "\n".join(str(w.render()) for w in screen.query("Static"))
            assert "money so far" in shown and "market logs" in shown
            assert "memory" in shown and "°C" in shown and f"/{last.power_limit_w:.0f} W" in shown
            await pilot.press("escape")
            await _until(pilot, lambda: not isinstance(app.screen, DetailScreen), 30, "back")
            # the ledger screen's canned query answers through the controller
            await pilot.press("l")
            await _until(pilot, lambda: isinstance(app.screen, LedgerScreen), 30, "ledger")
            ledger_screen = app.screen
            await pilot.press("f2")  # canned query 1: the receipt
            status = ledger_screen.query_one("#query-status")
            await _until(pilot, lambda: "row" in str(status.render()), 20, "the query's answer")
            assert ledger_screen.result is not None and ledger_screen.result.rows
            await pilot.press("escape")
            await _until(pilot, lambda: not isinstance(app.screen, LedgerScreen), 30, "back")
            await pilot.press("q")
            await _until(pilot, lambda: isinstance(app.screen, ChoiceScreen), 30, "quit dialog")
            await pilot.press("enter")
            await _until(pilot, lambda: not app.is_running, 60, "quit")

    try:
        asyncio.run(drive())
    finally:
        finish(app.return_value)
        if engine.alive():
            engine.shutdown("stop")


def test_detail_endpoint_answers_and_refuses_strangers(make_sim, tmp_path, runtime):
    """`GET /v1/instances/{id}` over the controller's socket; an id not held is a 404."""
    from rentwatch.run.dashboard import attach_in_process
    from rentwatch.run.service.api import ServiceError

    sim = make_sim(seed=7, offers=40, time_scale=120)
    path = tmp_path / "l.duckdb"
    engine = make_engine(
        sim.url,
        sim.api_key,
        load_campaign(campaign_text("tui", 1)),
        get_policy("default"),
        path,
        tmp_path / "key",
    )
    app, finish = attach_in_process(engine)
    try:
        client = ControllerClient(app.engine.target, timeout=30)
        deadline = time.monotonic() + 60
        while not client.snapshot().instances:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        iid = client.snapshot().instances[0].instance_id
        d = client.detail(iid, logs=False)
        assert d.instance_id == iid and d.market_logs == () and d.events
        with pytest.raises(ServiceError, match="not part of this campaign"):
            client.detail(999_999_999)
        client.close()
    finally:
        finish("stop")


# -- without a market ------------------------------------------------------------------------
def _stopped(iid: int, verified: bool, status: str = "exited"):
    return dataclasses.replace(
        SNAP,
        instance_id=iid,
        phase="stopped",
        status=status,
        passed_preflight=verified,
        ended_at=100.0,
    )


def _fleet(*snaps):
    return dataclasses.replace(FLEET, instances=tuple(snaps), now=200.0)


class _Recorder(StillEngine):
    def __init__(self) -> None:
        self.sent: list[object] = []

    def submit(self, intent):
        import concurrent.futures

        self.sent.append(intent)
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_result(Reply(True, "done"))
        return fut


def test_bulk_destroy_lists_first_and_takes_one_typed_confirmation():
    dud, offline, good = _stopped(11, False), _stopped(12, True, "offline"), _stopped(13, True)
    engine = _Recorder()

    async def run() -> None:
        app = RentwatchApp(engine, new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(140, 40)) as pilot:
            theirs = dataclasses.replace(_stopped(15, False), supervised=False)  # not rentwatch's
            app.post_message(
                FleetSnapshot(
                    _fleet(dud, offline, good, dataclasses.replace(SNAP, instance_id=14), theirs)
                )
            )
            await pilot.pause(0.2)
            await pilot.press("D")
            await pilot.pause(0.2)
            dialog = app.screen
            assert isinstance(dialog, BulkDestroyConfirm)
            assert [s.instance_id for s in dialog.doomed] == [11, 12]  # the verified one stays
            listed = str(dialog.query("Static").first().render())
            assert "i:11" in listed and "i:12" in listed and "i:13" not in listed
            await pilot.press(*"destroy 3", "enter")  # the wrong count: nothing happens
            await pilot.pause(0.2)
            assert engine.sent == [] and isinstance(app.screen, BulkDestroyConfirm)
            # while the dialog was open the operator (or the watchdog) started 12 again
            started = dataclasses.replace(offline, phase="verified", status="running")
            app.post_message(FleetSnapshot(_fleet(dud, started, good, theirs)))
            await pilot.press(*"destroy 2", "enter")
            await pilot.pause(0.3)
            assert [i.confirmation.instance_id for i in engine.sent] == [11]
            assert all(i.confirmation.valid() for i in engine.sent)

    asyncio.run(run())


def test_a_refused_action_says_what_could_not_be_done():
    class Refusing(_Recorder):
        def submit(self, intent):
            import concurrent.futures

            fut: concurrent.futures.Future = concurrent.futures.Future()
            fut.set_exception(RuntimeError("the market answered 409"))
            return fut

    async def run() -> None:
        app = RentwatchApp(Refusing(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(140, 40)) as pilot:
            app.post_message(FleetSnapshot(_fleet(_stopped(11, True))))
            await pilot.pause(0.2)
            await pilot.press("a")  # start the selected, stopped rental
            await pilot.pause(0.3)
            said = [n.message for n in app._notifications]
            assert "could not start 11: the market answered 409" in said, said
            await pilot.press("H")  # automation's own rental: nothing to hand over, say so
            await pilot.pause(0.3)
            assert "11 is automation's already" in [n.message for n in app._notifications]

    asyncio.run(run())


def test_quit_and_detach_count_stopped_rentals_billing_storage():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(140, 40)) as pilot:
            app.post_message(FleetSnapshot(_fleet(_stopped(11, True), _stopped(12, False), SNAP)))
            await pilot.pause(0.2)
            for key, purpose in (("q", "quit"), ("x", "detach")):
                await pilot.press(key)
                await pilot.pause(0.2)
                assert isinstance(app.screen, ChoiceScreen) and app.screen.purpose == purpose
                text = str(app.screen.query("Static").first().render())
                assert (
                    "holds 1 live instance(s) and 2 stopped" in text or "1 instance(s) keep" in text
                )
                assert "2 stopped rental(s)" in text and "storage" in text
                await pilot.press("escape")
                await pilot.pause(0.2)

    asyncio.run(run())


def test_sort_key_cycles_and_orders_both_views():
    cheap = dataclasses.replace(SNAP, instance_id=1, billed_usd=0.01, created_at=10.0, dph=0.1)
    dear = dataclasses.replace(SNAP, instance_id=2, billed_usd=0.50, created_at=20.0, dph=0.4)
    old = dataclasses.replace(SNAP, instance_id=3, billed_usd=0.20, created_at=1.0, dph=0.2)
    snaps = (cheap, dear, old)
    assert [s.instance_id for s in visible(snaps, 100.0, "", "billed")] == [2, 3, 1]
    assert [s.instance_id for s in visible(snaps, 100.0, "", "age")] == [3, 1, 2]
    assert [s.instance_id for s in visible(snaps, 100.0, "", "$/h")] == [2, 3, 1]

    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(140, 40)) as pilot:
            app.post_message(FleetSnapshot(_fleet(*snaps)))
            await pilot.pause(0.2)
            await pilot.press("o")  # new -> billed
            await pilot.pause(0.2)
            assert [s.instance_id for s in app.query_one(FleetView).snaps] == [2, 3, 1]
            assert "sort: billed" in str(app.query_one("#bar").render())  # `o` is in the footer
            await pilot.press("t")
            await pilot.pause(0.3)
            table = app.query_one("#table")
            ids = [table.coordinate_to_cell_key((r, 0)).row_key.value for r in range(3)]
            assert ids == ["2", "3", "1"]

    asyncio.run(run())


def test_every_fleet_key_is_in_the_command_palette():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(140, 40)):
            # the palette is read from the bindings: every key of the fleet and the app in it
            titles = [c.title for c in app.get_system_commands(app.screen)]
            keyed = {b.tooltip for b in (*FleetScreen.BINDINGS, *RentwatchApp.BINDINGS)}  # type: ignore[union-attr]
            assert keyed <= set(titles), keyed - set(titles)
            assert "Detail of the selected instance" in titles

    asyncio.run(run())


def test_canned_ledger_queries_need_no_ctrl_digit_and_are_in_the_palette():
    every = [k.strip() for b in LedgerScreen.BINDINGS for k in b.key.split(",")]
    keys = set(every)
    assert not any(k.startswith("ctrl+") and k[5:].isdigit() for k in keys)
    assert len(every) == len(keys), "one key bound twice on the ledger screen"
    assert {canned_key(k) for k in CANNED} <= keys

    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.press("l")
            await pilot.pause(0.3)
            screen = app.screen
            assert isinstance(screen, LedgerScreen)
            titles = [c.title for c in app.get_system_commands(screen)]
            for _, (name, _) in CANNED.items():
                assert f"Ledger query: {name}" in titles
            await pilot.press("f3")  # canned query 2: duds by failure class
            await pilot.pause(0.5)
            assert screen.sql == CANNED["2"][1]

    asyncio.run(run())


def test_ledger_views_carry_timestamps_beside_epochs():
    with new_ledger() as led:
        for view, col in (
            ("instances", "created_time"),
            ("quarantine", "since_time"),
            ("timeline", "time"),
        ):
            assert col in led.query(f"select * from {view} limit 0").columns
        when = led.query("select to_timestamp(1764400000) t").rows[0][0]
        assert when.year == 2025


def test_enter_opens_the_detail_from_panes_and_from_table_rows():
    async def run() -> None:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(140, 40)) as pilot:
            app.post_message(FleetSnapshot(FLEET))
            await pilot.pause(0.3)
            # the table takes the pane view's selection with it (selection is by instance id)
            for keys in (("down",), ("t",)):
                await pilot.press(*keys, "enter")
                await pilot.pause(0.3)
                screen = app.screen
                assert isinstance(screen, DetailScreen), keys
                assert screen.instance_id == FLEET.instances[1].instance_id
                await pilot.press("escape")
                await pilot.pause(0.2)

    asyncio.run(run())


def test_stop_and_start_on_a_destroyed_instance_send_nothing():
    engine = _Recorder()

    async def run() -> None:
        app = RentwatchApp(engine, new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=(140, 40)) as pilot:
            gone = dataclasses.replace(SNAP, phase="destroyed", ended_at=100.0)
            app.post_message(FleetSnapshot(_fleet(gone)))
            await pilot.pause(0.2)
            await pilot.press("s", "a")
            await pilot.pause(0.2)
            assert engine.sent == []

    asyncio.run(run())


def _gone(**kw: object) -> object:
    """A rental that left service at 400 s, for the status-history table."""
    from rentwatch.views.detail import InstanceDetail

    base: dict[str, object] = dict(
        instance_id=1,
        now=500.0,
        time_scale=1.0,
        gpu_name="RTX 3070",
        machine_id=2,
        host_id=3,
        phase="destroyed",
        status="running",
        status_msg="success",
        created_at=0.0,
        ended_at=400.0,
        gpu_dph=0.1,
        storage_dph=0.01,
        gpu_usd=0.0,
        storage_usd=0.0,
        bandwidth_usd=0.0,
        preflight={},
        status_history=(),
        samples=(),
        jobs=(),
        market_logs=(),
        market_logs_error="",
        events=(),
    )
    return InstanceDetail(**{**base, **kw})  # type: ignore[arg-type]


def test_a_rental_that_left_service_has_no_now_row():
    """A destroyed instance's status history ends where it left service, not with a `now` row
    repeating the last status it had (`running` for a host long gone)."""
    from rentwatch.widgets.detail_screen import render_status_history

    gone = render_status_history(_gone())
    assert [c.plain for c in gone.columns[1]._cells] == ["destroyed"]
    live = render_status_history(_gone(ended_at=None, phase="verified"))
    assert [c.plain for c in live.columns[0]._cells] == ["now"]


def test_the_left_service_row_sits_in_time_order():
    """A stopped rental's history lists the engine's stop where it happened: the market's own
    'stopped' line, seen a poll later, comes after it (it was listed first)."""
    from rentwatch.views.detail import StatusLine
    from rentwatch.widgets.detail_screen import render_status_history

    d = _gone(
        phase="stopped",
        status="stopped",
        status_msg="Stopped by user",
        status_history=(
            StatusLine(100.0, "running", "success"),
            StatusLine(410.0, "stopped", "Stopped by user"),
        ),
    )
    table = render_status_history(d)
    assert [c.plain for c in table.columns[2]._cells] == [
        "success",
        "left service",
        "Stopped by user",
    ]


@pytest.mark.parametrize("width", [80, 200])
def test_an_events_reason_keeps_most_of_an_80_column_screen(width):
    # at 80 columns the seq, kind, actor and ok columns left the reason 13: a word a line
    from rentwatch.views.detail import LedgerLine
    from rentwatch.widgets.detail_screen import render_events
    from rich.console import Console

    reason = "0 of 3 verified, 0 booting: rent one more (1 spare(s) for 3 missing)"
    actor = "rule:preflight_deadline"  # the longest actor, with a million events' seq
    d = _gone(events=(LedgerLine(1000123, 100.0, "create", actor, True, reason),))
    console = Console(width=width, record=True, color_system=None)
    console.print(render_events(d, width))
    lines = [ln for ln in console.export_text().splitlines() if ln.strip()]
    body = lines[lines.index(next(ln for ln in lines if "━" in ln)) + 1 :]
    assert len(body) <= 3, body  # the reason in two lines at most, the event's in three
    text = "".join(ln.replace("│", "").replace(" ", "") for ln in body)
    assert "1000123" in text and actor in text and "✔" in text and "…" not in text


def test_a_stopped_hosts_last_sample_is_not_called_its_utilization_now():
    """A newcomer's stopped instance read "utilization, now 97%": the last sample before the
    stop, shown as if the GPU were busy still."""
    at = 1_800_000_000.0
    samples = tuple(Sample(at + 60 * i, 97.0, 2500.0, 2520.0, ()) for i in range(3))
    d = InstanceDetail(
        7, at + 600, 1.0, "RTX 4090", 1, 1, "working", "running", "", at, None,
        0.3, 0.01, 0.1, 0.0, 0.0, {}, (), samples, (), (), "", (),
    )  # fmt: skip
    assert "utilization, now 97%" in render_gpu(d).plain
    stopped = render_gpu(dataclasses.replace(d, phase="stopped", ended_at=at + 300)).plain
    assert "now 97%" not in stopped
    assert "utilization 97% at the last sample" in stopped and "stopped now" in stopped


def test_an_idle_gpu_is_not_drawn_as_throttled():
    """A stopped rental's idle GPU read "throttle !!!!! now: gpu_idle": NVML's idle reason is
    the card resting, not a slowdown; only the reasons that can slow work are marked."""
    at = 1_800_000_000.0
    idle = tuple(Sample(at + 60 * i, 0.0, 210.0, 2520.0, ("gpu_idle",)) for i in range(5))
    d = InstanceDetail(
        7, at + 600, 1.0, "RTX 4090", 1, 1, "stopped", "stopped", "", at, at + 300,
        0.3, 0.01, 0.1, 0.0, 0.0, {}, (), idle, (), (), "", (),
    )  # fmt: skip
    shown = render_gpu(d)
    row = next(ln for ln in shown.plain.splitlines() if ln.strip().startswith("throttle"))
    assert "!" not in row and "now:" not in row  # history, and none of it a slowdown
    assert "none" in row and "gpu_idle" in row
    assert not [sp for sp in shown.spans if "red" in str(sp.style)]
    hot = (*idle, Sample(at + 400, 99.0, 1800.0, 2520.0, ("hw_thermal_slowdown", "gpu_idle")))
    row = next(
        ln
        for ln in render_gpu(
            dataclasses.replace(d, phase="working", samples=hot)
        ).plain.splitlines()
        if ln.strip().startswith("throttle")
    )
    assert row.split()[1] == "·····!" and "now: hw_thermal_slowdown" in row


def test_the_detail_charts_vital_signs_and_says_what_the_card_does_not_report():
    at = 1_800_000_000.0
    samples = tuple(
        Sample(
            at + 60 * i, 97.0, 2500.0, 2520.0, (), mem_used_mb=18432.0, mem_total_mb=24576.0,
            temp_c=70.0 + 5 * i, power_w=200.0 + 80 * i, power_limit_w=450.0, fan_pct=60.0,
        )
        for i in range(4)
    )  # fmt: skip
    d = InstanceDetail(
        7, at + 600, 1.0, "RTX 4090", 1, 1, "working", "running", "", at, None,
        0.3, 0.01, 0.1, 0.0, 0.0, {}, (), samples, (), (), "", (),
    )  # fmt: skip
    text = render_gpu(d).plain
    assert "18.0/24.0 GiB" in text and "85°C" in text
    assert "fan 60%" in text and "not reported (no ECC)" in text and "retired pages -" in text
    power = next(ln for ln in text.splitlines() if ln.strip().startswith("power"))
    assert power.rstrip().endswith("440/450 W")
    # the power sparkline rises with the draw, over time
    spark = power.split()[1]
    assert list(spark) == sorted(spark) and spark[0] != spark[-1]


def test_the_head_says_what_the_rental_bills_now():
    # a stopped rental's head said "$0.110/h", its running price: it bills storage only
    from rentwatch.widgets.detail_screen import head_fields

    def billed(**kw) -> str:
        return " ".join(t.plain for t in head_fields(_gone(**kw)))

    assert "$0.110/h" in billed(phase="verified", ended_at=None)
    assert "$0.0100/h storage only" in billed(phase="stopped")
    assert "billing nothing" in billed(phase="destroyed") and "$0.110" not in billed()
