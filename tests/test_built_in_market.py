"""The demo's market is a simulator inside the controller: the quit dialog told the operator to
run `rentwatch end ... --market-url http://127.0.0.1:PORT` later, a URL that dies with the
controller. For a built-in market it says what is true (the market and its rentals end with
the controller; nothing is left billing), and keeps the command for a market that outlives it."""

from __future__ import annotations

import asyncio
import dataclasses

from rentwatch.ledger import Ledger
from rentwatch.sim.served import served_here
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.modals import ChoiceScreen, ended_choice, quit_choice

from .ledgers import new_ledger
from .test_snapshots import FLEET, SIZE, StillEngine

ELSEWHERE = "http://127.0.0.1:9"  # a `rentwatch sim` of its own, say: it outlives us
BUILT_IN = "http://127.0.0.1:8"


def test_the_snapshot_names_a_market_only_where_it_outlives_the_engines_process(tmp_path):
    """The snapshot (built in the engine's process) says whether its market is built in there,
    and its end command names the market only where it is not."""
    from rentwatch.engine.hosts.ssh import load_or_create_key
    from rentwatch.sim import served
    from rentwatch.views.snapshot import snapshot

    from .test_supervisor_unit import run

    seen = []

    async def body(sup, market, ledger):
        for url in (ELSEWHERE, BUILT_IN):
            market.base_url = url
            seen.append(snapshot(sup, sup.now()))

    served.add(BUILT_IN)  # as SimServer.start registers the demo's market
    try:
        run(
            load_or_create_key(tmp_path / "key"), body, ledger=Ledger(tmp_path / "u.duckdb")
        ).close()
    finally:
        served.discard(BUILT_IN)
    elsewhere, here = seen
    assert not elsewhere.market_built_in and f"--market-url {ELSEWHERE}" in elsewhere.end_command
    assert here.market_built_in and "--market-url" not in here.end_command
    assert here.end_command.startswith("rentwatch end --campaign u --ledger ")
    assert not served_here(BUILT_IN)


def test_a_sim_server_is_served_here_while_it_runs(make_sim):
    sim = make_sim(seed=1, offers=5)
    assert served_here(sim.url) and not served_here(ELSEWHERE)
    url = sim.url
    sim.stop_thread()
    assert not served_here(url)  # gone with its server


def _quit_text(built_in: bool, outlives: bool = True) -> str:
    end = "rentwatch end --campaign demo --ledger /d/l.duckdb" + (
        "" if built_in else f" --market-url {ELSEWHERE}"
    )
    screen = quit_choice(3, 1, "demo", outlives, "stop", 0.025, end + " --destroy", built_in)
    return " ".join(screen.text.split())


def test_the_quit_dialog_says_a_built_in_market_ends_with_the_controller():
    text = _quit_text(built_in=True)
    assert "--market-url" not in text
    assert "built-in simulated market" in text and "nothing is left billing" in text
    # left running it goes on: ended through the controller while it runs
    assert "`rentwatch end --campaign demo --ledger /d/l.duckdb --destroy` while it runs" in text
    foreground = _quit_text(built_in=True, outlives=False)
    assert "lives in this process" in foreground and "rentwatch end" not in foreground


def test_the_quit_dialog_keeps_the_command_for_a_real_market():
    text = _quit_text(built_in=False)
    assert f"--market-url {ELSEWHERE} --destroy` later" in text
    assert "built-in" not in text


def test_the_ended_dialog_says_nothing_is_left_on_a_built_in_market():
    gone = " ".join(ended_choice("campaign ended", "demo", "", built_in=True).text.split())
    assert "nothing is left billing" in gone and "still bills" not in gone
    real = ended_choice("campaign ended", "demo", f"rentwatch end --market-url {ELSEWHERE}")
    assert "still bills until ended" in real.text and ELSEWHERE in real.text


def test_the_dashboard_reads_the_snapshots_word_for_it():
    async def run(built_in: bool) -> str:
        snap = dataclasses.replace(
            FLEET, market_built_in=built_in, end_command="rentwatch end --campaign qlora-sweep"
        )
        app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
        async with app.run_test(size=SIZE) as pilot:
            app.post_message(FleetSnapshot(snap))
            await pilot.pause(0.3)
            await pilot.press("q")
            await pilot.pause(0.3)
            assert isinstance(app.screen, ChoiceScreen)
            return " ".join(app.screen.text.split())

    assert "built-in simulated market" in asyncio.run(run(True))
    assert "built-in" not in asyncio.run(run(False))
