"""A dashboard that outlived its controller, and the `rentwatch end` hints that must work as
printed. A background controller that ends on its own (its campaign done, or its engine
failed) tells an attached dashboard why as it goes (`bye`, with the command that ends what the
campaign left); the dashboard says so, stops offering what went through the controller (stop,
leave running, the instance keys), and offers only quitting with that command. Every printed
`rentwatch end` names the campaign's ledger and, off Vast's own market, `--market-url`."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
from rentwatch.engine.ending import end_command
from rentwatch.engine.supervisor import Outcome
from rentwatch.ledger import Ledger
from rentwatch.run.service import api, registry
from rentwatch.run.service.controller import Controller
from rentwatch.run.service.remote import RemoteEngine
from rentwatch.run.service.target import Target
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.modals import ChoiceScreen
from textual.widgets import Button, Static

from .ledgers import new_ledger
from .test_snapshots import FLEET, SIZE, StillEngine

SIM = "http://127.0.0.1:38801"


def test_the_end_command_names_the_ledger_and_a_market_other_than_vasts(tmp_path):
    ledger = tmp_path / "l.duckdb"
    off = end_command("demo", ledger, SIM + "/")
    assert off == f"rentwatch end --campaign demo --ledger {ledger} --market-url {SIM} --destroy"
    real = end_command("my run", ledger, "https://console.vast.ai", destroy=False)
    assert real == f"rentwatch end --campaign 'my run' --ledger {ledger}"


def test_the_snapshot_carries_the_campaigns_own_end_command(tmp_path):
    # what the quit dialog prints comes from the engine: its ledger, its market
    from rentwatch.engine.hosts.ssh import load_or_create_key
    from rentwatch.views.snapshot import snapshot

    from .test_supervisor_unit import run

    seen: list[str] = []

    async def body(sup, market, ledger):
        market.base_url = SIM  # a simulator's, not Vast's own
        seen.append(snapshot(sup, sup.now()).end_command)

    book = tmp_path / "u.duckdb"
    run(load_or_create_key(tmp_path / "key"), body, ledger=Ledger(book)).close()
    assert seen == [end_command("u", book, SIM)]
    assert f"--ledger {book.resolve()}" in seen[0] and f"--market-url {SIM}" in seen[0]


def _controller(tmp_path: Path, finished: str | None, failure: str | None = None) -> Controller:
    ctrl = Controller("sweep", tmp_path / "l.duckdb")
    sup = SimpleNamespace(
        finished=Outcome(True, finished) if finished else None,
        failure=failure,
        market=SimpleNamespace(base_url=SIM),
        listeners=[],
    )
    ctrl.bind(sup)  # type: ignore[arg-type]
    return ctrl


def test_the_controllers_goodbye_says_why_in_its_own_words(tmp_path):
    bye = _controller(tmp_path, "all jobs done").farewell()
    assert bye["reason"] == "campaign ended: all jobs done" and bye["ended"] is True
    assert bye["end"] == end_command("sweep", tmp_path / "l.duckdb", SIM)
    failed = _controller(tmp_path, None, "the marketplace rejected the API key: 401").farewell()
    assert failed["reason"].startswith("the engine failed: the marketplace rejected")
    assert failed["ended"] is False


def test_the_quit_dialog_prints_the_end_command_that_works(tmp_path):
    stopped = dataclasses.replace(FLEET.instances[2], phase="stopped")
    cmd = end_command("qlora-sweep", tmp_path / "l.duckdb", SIM)
    fleet = dataclasses.replace(FLEET, instances=(*FLEET.instances[:2], stopped), end_command=cmd)

    async def run() -> str:
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(fleet))
            await pilot.pause(0.3)
            await pilot.press("q")
            await pilot.pause(0.3)
            assert isinstance(app.screen, ChoiceScreen)
            return app.screen.text

    text = asyncio.run(run())
    assert f"`{cmd}`" in text and f"--market-url {SIM}" in text


def test_a_dashboard_whose_controller_ended_says_why_and_offers_only_quit(tmp_path, monkeypatch):
    hint = end_command("qlora-sweep", tmp_path / "l.duckdb", SIM)
    done = dataclasses.replace(FLEET, finished="all jobs done")

    engine = RemoteEngine(Target(socket=str(tmp_path / "gone.sock")), pid=4242)

    async def events():
        # the controller's last snapshot, then its goodbye, then its socket is gone
        if not engine.ended:
            yield "snapshot", api.snap_to_json(done)
            yield "bye", {"reason": "campaign ended: all jobs done", "ended": True, "end": hint}
            return
        raise httpx.ConnectError("no socket")

    # on this engine alone: another still reconnecting in this process must not take it
    monkeypatch.setattr(engine, "_events", events)
    monkeypatch.setattr("rentwatch.run.service.remote.RECONNECT_S", 0.05)
    monkeypatch.setattr(registry, "pid_alive", lambda pid: False)

    async def run() -> tuple[str, str, set[str], str | None]:
        app = RentwatchApp(engine, new_ledger(), refresh_s=0.05)
        async with app.run_test(size=SIZE) as pilot:
            deadline = time.monotonic() + 20
            while engine.ended is None and time.monotonic() < deadline:
                await pilot.pause(0.05)
            await pilot.pause(0.3)
            bar = str(app.query_one("#bar", Static).render())
            # nothing that went through the controller is offered any more
            # (each screen owns its keys: the ones the fleet screen answers now, the app's too)
            offered = {b.binding.action for b in app.screen.active_bindings.values()}
            for action in ("stop", "destroy", "start", "detail", "end_campaign", "jobs"):
                assert action not in offered, action
            assert "quit_ask" in offered
            await pilot.press("x")  # Leave running, once the default of x: now only quit
            await pilot.pause(0.3)
            assert isinstance(app.screen, ChoiceScreen)
            text = app.screen.text
            buttons = {b.id or "" for b in app.screen.query(Button)}
            await pilot.press("enter")  # Quit is focused
            await pilot.pause(0.5)
        return bar, text, buttons, app.return_value

    bar, text, buttons, chosen = asyncio.run(run())
    assert "CONTROLLER ENDED" in bar and "campaign ended: all jobs done" in bar
    assert "ENGINE FAILED" not in bar
    assert "campaign ended: all jobs done" in text and hint in text
    assert buttons == {"ended", "cancel"}  # no Stop, no Leave running
    assert chosen == "ended"
