"""[K] An engine failure does not vanish: a wrong key stops the start with a plain error, a key
rejected mid-session stays on screen (the bar, not only a toast that fades), the dashboard exits
non-zero, and `watch`'s no-key message names what `watch` accepts (it has no --api-key)."""

from __future__ import annotations

import asyncio
import time

import pytest
from rentwatch.cli.main import main
from rentwatch.core.campaign import renting_nothing
from rentwatch.core.policy import get_policy
from rentwatch.engine.hosts.ssh import load_or_create_key
from rentwatch.market.errors import AuthError
from rentwatch.run.dashboard import attach_in_process, make_engine
from rentwatch.run.service.controller import EngineFailed
from rentwatch.views.snapshot import snapshot
from textual.widgets import Static

from .fake_market import FakeMarket
from .test_operator_intent import go


def test_a_rejected_key_mid_session_is_in_every_snapshot_until_it_clears(tmp_path):
    key = load_or_create_key(tmp_path / "k")

    async def body(sup, market, ledger):
        market.fail["list_instances"] = AuthError(401, "auth_error", "key revoked")
        with pytest.raises(AuthError):
            await sup.poll_once()
        snap = snapshot(sup, market.t)
        assert snap.engine_error and "rejected the API key" in snap.engine_error
        await sup.poll_once()
        assert snapshot(sup, market.t).engine_error is None

    go(key, body, FakeMarket([]), adopt_all=True, fleet=0)


def _bar(app) -> str:
    return str(app.query_one("#bar", Static).render())


def _watch(sim, tmp_path, api_key):
    return make_engine(
        sim.url,
        api_key,
        renting_nothing("watch"),
        get_policy("default"),
        tmp_path / "l.duckdb",
        tmp_path / "key",
        adopt_all=True,
        observe_only=True,
    )


def test_a_wrong_key_says_so_plainly(make_sim, tmp_path):
    sim = make_sim(seed=7, offers=10, time_scale=60)
    engine = _watch(sim, tmp_path, "not-the-key")
    with pytest.raises(EngineFailed, match="rejected the API key"):
        attach_in_process(engine)
    assert engine.failure and "rejected the API key" in engine.failure


def test_a_key_rejected_mid_session_stays_said(make_sim, tmp_path):
    sim = make_sim(seed=7, offers=10, time_scale=60)
    engine = _watch(sim, tmp_path, sim.api_key)
    app, finish = attach_in_process(engine)

    def revoke() -> None:
        sim.market.api_key = "another-key"

    async def run() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            sim.call(revoke)
            deadline = time.monotonic() + 30
            while "ENGINE FAILED" not in _bar(app) and time.monotonic() < deadline:
                await pilot.pause(0.1)
            assert "ENGINE FAILED" in _bar(app) and "API key" in _bar(app)
            await pilot.pause(6.0)  # longer than a toast lives
            assert "ENGINE FAILED" in _bar(app)

    try:
        asyncio.run(run())
        assert engine.failure and "rejected the API key" in engine.failure
    finally:
        app.engine.shutdown("leave")
        finish(app.return_value)


def test_watch_without_a_key_names_what_watch_accepts(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["watch", "--ledger", str(tmp_path / "l.duckdb")]) != 0
    err = capsys.readouterr().err
    assert "VAST_API_KEY" in err and "vast_api_key" in err
    assert "--api-key" not in err
