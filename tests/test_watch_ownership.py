"""[K] The real dashboard under `watch` against the simulator: instances made outside rentwatch
(straight through the market's API, with no label or a foreign one) are shown but never
touched, through the whole session and the quit dialog's default (stop all)."""

from __future__ import annotations

import asyncio
import time

import pytest
from rentwatch.core.campaign import renting_nothing
from rentwatch.core.policy import get_policy
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign
from rentwatch.market.vast.client import VastClient
from rentwatch.run.dashboard import attach_in_process, make_engine
from textual.widgets import Static

from .campaigns import campaign_text


async def _by_hand(url: str, key: str) -> list[int]:
    """What an operator rents by hand (the official CLI posts the same request)."""
    client = VastClient(url, key)
    try:
        offers = await client.search_offers({}, limit=50)
        ids = []
        labels = (None, "my-notebook", "rw:another-ledger:abc", None)
        for o, label in zip(offers[:4], labels, strict=True):
            res = await client.create_instance(o.id, image="img", disk_gb=10, label=label)
            ids.append(res.instance_id)
        return ids
    finally:
        await client.aclose()


async def _until(pilot, cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        await pilot.pause(0.1)
    raise AssertionError("condition never met")


@pytest.mark.parametrize("with_campaign", [False, True])
def test_hand_made_instances_survive_watch_and_quit(make_sim, tmp_path, with_campaign):
    sim = make_sim(seed=11, offers=30, time_scale=240)
    theirs = asyncio.run(_by_hand(sim.url, sim.api_key))
    path = tmp_path / "l.duckdb"
    camp = load_campaign(campaign_text("own", 1)) if with_campaign else renting_nothing("watch")
    engine = make_engine(
        sim.url,
        sim.api_key,
        camp,
        get_policy("default"),
        path,
        tmp_path / "key",
        adopt_all=True,
        observe_only=not with_campaign,
    )
    app, finish = attach_in_process(engine)

    async def run() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await _until(
                pilot,
                lambda: (
                    app.latest is not None
                    and {s.instance_id for s in app.latest.instances if not s.supervised}
                    >= set(theirs)
                ),
            )
            # the fleet screen draws the snapshots the app forwards it: one with them in
            await _until(
                pilot,
                lambda: (
                    app.fleet._shown is not None
                    and {s.instance_id for s in app.fleet._shown.instances if not s.supervised}
                    >= set(theirs)
                ),
            )
            bar = str(app.query_one("#bar", Static).render())
            assert ("OBSERVE ONLY" in bar) == (not with_campaign)
            assert "not rentwatch's 4" in bar
            # half an hour of market time passes at once (as it would for a dashboard that
            # froze), and the engine polls the market as it is then, twice: a rule that would
            # touch them (a boot too long, a status unchanged) has had its time
            after = sim.call(sim.market.clock.now) + 30 * 60
            sim.call(sim.market.clock.advance, 30 * 60)
            polled: set[float] = set()

            def polled_twice() -> bool:
                if app.latest is not None and app.latest.now >= after:
                    polled.add(app.latest.now)
                return len(polled) >= 2

            await _until(pilot, polled_twice)
            await pilot.press("q")
            await _until(pilot, lambda: len(app.screen_stack) > 1)
            await pilot.press("enter")  # the default: stop all
            await _until(pilot, lambda: not app.is_running, timeout=60)

    try:
        asyncio.run(run())
        engine.join()  # the controller was asked to stop all: its engine releases, then ends
    finally:
        app.engine.shutdown("leave")
        finish(app.return_value)
    truth = {r["id"]: r for r in sim.call(sim.market.truth)["instances"]}
    for iid in theirs:
        assert truth[iid]["destroyed_at"] is None and truth[iid]["stopped_at"] is None, truth[iid]
    with Ledger(path) as ledger:  # the engine's, closed with it
        touched = ledger.events(
            where="kind IN ('stop', 'start', 'destroy', 'abandon') AND instance_id IN "
            f"({', '.join(map(str, theirs))})"
        )
    assert touched == []
