"""[J] Every figure on screen is the ledger's figure: the dashboard's live snapshot against the
receipt (the ledger's `tenures` view) on the same history, for the histories where the
engine's in-memory record and the ledger's events could read differently. Against the
in-memory fake market: each runs in well under a second."""

from __future__ import annotations

import pytest
from rentwatch.core.lifecycle import Phase
from rentwatch.market.errors import MarketUnavailable
from rentwatch.views.snapshot import snapshot

from .test_supervisor_unit import key as key  # the module's SSH key fixture
from .test_supervisor_unit import run, verified
from .test_written_off import _back, _write_off


def _same(sup, ledger) -> None:
    """The snapshot at the ledger's clock says what the receipt says."""
    now = ledger.query("SELECT now FROM ledger_clock").rows[0][0]
    snap = snapshot(sup, now)
    (receipt,) = ledger.receipt()
    assert snap.gpu_hours == pytest.approx(receipt["gpu_hours"], abs=1e-9)
    per_h = receipt["usd_per_gpu_hour"]
    assert snap.usd_per_gpu_hour == (per_h and pytest.approx(per_h, rel=1e-9))
    assert (snap.duds, snap.verified) == (receipt["duds"], receipt["verified"])
    assert snap.dud_usd == pytest.approx(receipt["dud_usd"], abs=1e-9)


def test_a_verified_host_that_went_offline_delivered_until_then_on_screen_too(key):
    """The observer marks `offline` (not `halt`); the ledger ends delivery at the offline
    status, so must the screen, even when the stop that follows comes an hour later."""

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        market.set(iid, actual="offline")
        market.fail["stop_instance"] = MarketUnavailable("down")
        market.t += 10
        await sup.poll_once()  # offline: its stop fails
        market.t += 3600
        await sup.poll_once()  # stopped an hour later
        assert sup.attempts[iid].life.phase == Phase.STOPPED
        _same(sup, ledger)

    run(key, body, fleet=1)


def test_a_verified_instance_written_off_and_back_delivered_through_the_gap(key):
    """A write-off answered by a return is void in the ledger (`standing_events`): delivery
    did not end there, on screen either."""

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        await _write_off(sup, market, iid)
        await _back(sup, market, iid)
        assert sup.attempts[iid].life.phase == Phase.VERIFIED
        market.t += 600
        await sup.poll_once()
        _same(sup, ledger)

    run(key, body, fleet=1)


def test_a_booting_instance_written_off_and_back_is_no_dud(key):
    """Nor is it gone: not a dud, and its lifetime is not cut at the void write-off."""

    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()
        await _write_off(sup, market, iid)
        await _back(sup, market, iid)
        assert sup.attempts[iid].life.phase == Phase.BOOTING
        _same(sup, ledger)
        assert snapshot(sup, market.t).duds == 0
        # given up on later: a dud, its lifetime to the destroy, as the receipt says
        await sup.release_all("rule:campaign_end", "over")
        _same(sup, ledger)
        (receipt,) = ledger.receipt()
        from rentwatch.views.snapshot import figures

        fig = figures(sup, market.t)
        assert fig["dud_mean_lifetime_min"] == pytest.approx(receipt["dud_mean_lifetime_min"])

    run(key, body, fleet=1)
