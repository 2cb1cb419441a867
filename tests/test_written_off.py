"""[J] A written-off instance that the market lists again is held again: the market said it was
gone (or would not answer for it) and it went on billing. Against the in-memory fake market:
each runs in well under a second."""

from __future__ import annotations

import dataclasses

import pytest
from rentwatch.core.lifecycle import Phase
from rentwatch.engine.cadence import Sight
from rentwatch.ledger import Ledger
from rentwatch.market.errors import MarketUnavailable

from .campaigns import run_campaign
from .ledgers import new_ledger
from .test_supervisor_unit import key as key  # the module's SSH key fixture
from .test_supervisor_unit import kinds, run, to_running, verified


async def _write_off(sup, market, iid: int) -> None:
    """Left out of the list, and denied when asked directly: written off (`lost`)."""
    market.hidden.add(iid)
    market.denied.add(iid)
    market.t += 10
    await sup.poll_once()
    assert sup.attempts[iid].life.phase == Phase.LOST


async def _back(sup, market, iid: int, polls: int = 3) -> None:
    """Still gone for a few more polls, then listed again."""
    for _ in range(polls):
        market.t += 10
        await sup.poll_once()
    market.hidden.discard(iid)
    market.denied.discard(iid)
    market.t += 10
    await sup.poll_once()


def _row(ledger, iid: int) -> dict:
    return next(r for r in ledger.instance_rows() if r["instance_id"] == iid)


def test_a_booting_instance_written_off_and_listed_again_is_held_and_released(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()
        created = sup.attempts[iid].created_at
        await _write_off(sup, market, iid)
        await _back(sup, market, iid)
        a = sup.attempts[iid]
        assert a.life.phase == Phase.BOOTING and a in sup.fleet.held()
        (back,) = kinds(ledger, "returned")
        assert back.instance_id == iid and back.detail["gap_s"] == pytest.approx(40)
        await to_running(sup, market, iid)
        assert a.life.phase in (Phase.RUNNING, Phase.VERIFYING)
        await sup.release_all("rule:campaign_end", "over")
        assert ("destroy_instance", iid) in market.calls  # released, not leaked
        assert a.life.phase == Phase.DESTROYED
        # billed as if never written off: storage from the create to the destroy, unbroken,
        # and the ledger's figure is the engine's
        row = _row(ledger, iid)
        end = market.t
        assert row["storage_usd"] == pytest.approx(a.storage_dph * (end - created) / 3600)
        assert row["total_usd"] == pytest.approx(a.charges("running", end).total_usd)
        assert row["destroyed_at"] == pytest.approx(end)  # not the write-off's time
        # a replacement was made while it was written off; both cancelled, neither proven:
        # no fault of their hosts', so no duds, counted apart ([AC] 7)
        r = ledger.receipt()[0]
        assert (r["duds"], r["cancelled"]) == (0, len(sup.attempts)) == (0, 2)

    run(key, body)


def test_a_verified_instance_written_off_and_listed_again_is_in_service_and_only_stopped(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        await _write_off(sup, market, iid)
        await _back(sup, market, iid)
        a = sup.attempts[iid]
        assert a.life.phase == Phase.VERIFIED and a in sup.fleet.in_service()
        assert a.tend_task is not None and not a.tend_task.done()  # tended again
        await sup.release_all("rule:campaign_end", "over")
        assert ("stop_instance", iid) in market.calls
        assert ("destroy_instance", iid) not in market.calls  # proven: never destroyed
        row = _row(ledger, iid)
        assert not row["dud"] and row["destroyed_at"] is None
        assert row["total_usd"] == pytest.approx(a.charges("running", market.t).total_usd)

    run(key, body, fleet=1)


def test_an_abandoned_instance_written_off_and_listed_again_is_destroyed(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()
        market.fail["destroy_instance"] = MarketUnavailable("down")
        market.t += 6 * 60 + 5
        await sup.poll_once()  # frozen: abandoned, its destroy failed
        assert sup.attempts[iid].life.phase == Phase.ABANDONED
        await _write_off(sup, market, iid)
        market.hidden.discard(iid)
        market.denied.discard(iid)
        market.t += 10
        await sup.poll_once()  # listed again: held again as abandoned, its destroy made
        assert kinds(ledger, "returned")
        assert sup.attempts[iid].life.phase == Phase.DESTROYED
        assert market.boxes[iid].intended == "destroyed"

    run(key, body)


def test_a_failed_destroy_of_an_abandoned_instance_is_made_again_next_poll(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()
        market.fail["destroy_instance"] = MarketUnavailable("down")
        market.t += 6 * 60 + 5
        await sup.poll_once()
        assert sup.attempts[iid].life.phase == Phase.ABANDONED
        market.t += 10
        await sup.poll_once()
        assert sup.attempts[iid].life.phase == Phase.DESTROYED  # not left billing to the end

    run(key, body)


def test_the_ledger_voids_a_write_off_that_a_return_answers():
    """The SQL side: a `lost` answered by a later `returned` bills on through the gap; one
    never answered ends the billing where it was written."""

    from .test_ledger import _act, _create

    led = new_ledger()
    for iid in (1, 2):
        _create(led, iid, 0, 0.36, 0.036, mode="running")
        led.record(
            "status",
            at=0,
            actor="engine",
            reason="r",
            instance_id=iid,
            detail={"status": "running"},
        )
        led.record("lost", at=3600, actor="engine", reason="gone", instance_id=iid, ok=True)
    led.record("returned", at=7200, actor="engine", reason="back", instance_id=1, ok=True)
    _act(led, "destroy", 1, 10800)
    rows = {r["instance_id"]: r for r in led.instance_rows()}
    assert rows[1]["total_usd"] == pytest.approx(3 * (0.36 + 0.036))
    assert rows[1]["destroyed_at"] == 10800
    assert rows[2]["total_usd"] == pytest.approx(0.36 + 0.036)
    assert rows[2]["destroyed_at"] == 3600
    led.close()


def test_a_written_off_instance_in_a_filtered_answer_is_held_again(key):
    """A big fleet's polls list pages (by label, by state, a sweep's): a written-off instance
    on one of them is held again, as from a whole list."""

    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()
        await _write_off(sup, market, iid)
        market.t += 10
        page = [market.boxes[iid].row()]
        await sup.observer.observe(Sight(page, full=False), market.t)
        assert sup.attempts[iid].life.phase == Phase.BOOTING
        assert [e.instance_id for e in kinds(ledger, "returned")] == [iid]

    run(key, body)


def test_a_row_on_its_way_out_is_not_a_return(key):
    """A written-off instance listed as destroyed (a market that lists it a while longer) stays
    written off."""

    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()
        await _write_off(sup, market, iid)
        market.t += 10
        page = [dataclasses.replace(market.boxes[iid].row(), target_state="destroyed")]
        await sup.observer.observe(Sight(page, full=False), market.t)
        assert sup.attempts[iid].life.phase == Phase.LOST and not kinds(ledger, "returned")

    run(key, body)


def test_a_rental_the_market_stops_before_it_is_proven_is_destroyed(make_sim, tmp_path):
    """A contract's end (or a zero balance) stops rentals mid-boot: never proven, nothing to
    keep, and their disks bill on until destroyed; ours, so automation destroys them."""
    sim = make_sim(
        seed=5,
        offers=30,
        stepped=True,  # the engine on the market's clock: contracts end 3-6 market minutes
        # after the market opens, mid-boot, on any box (at 60x over wall time, 3-6 wall seconds)
        host_class=[{"behaviour": "healthy", "share": 1, "pull_min": [4, 8]}],
        states={"contract_end_share": 0.5, "contract_end_min": [3, 6]},
    )
    code, ledger = run_campaign(sim, tmp_path, "default", name="ends", fleet=2)
    rows = sim.call(sim.market.truth)["instances"]
    cut = [r for r in rows if r["market_stopped_at"] is not None]
    assert cut, "no rental was stopped by the market: the scenario no longer tests this"
    led = Ledger(ledger)
    proven = {e.instance_id for e in led.events(where="kind = 'preflight_passed'")}
    left = [r["id"] for r in cut if r["id"] not in proven and r["destroyed_at"] is None]
    assert left == [], f"stopped by the market, never proven, still billing storage: {left}"
    # [AC 7] no fault of their hosts': counted apart from the duds, not as duds
    stopped_unproven = {r["id"] for r in cut if r["id"] not in proven}
    r = led.receipt("ends")[0]
    assert r["stopped_by_market"] == len(stopped_unproven) > 0
    given_up = led.events(where="kind = 'abandon' AND actor = 'rule:market_stop'")
    assert {e.instance_id for e in given_up} == stopped_unproven
    assert code == 0
