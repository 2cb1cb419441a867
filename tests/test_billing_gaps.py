"""[J] Billing where the ledger cannot watch: a dark host stopped while dark (the market shows it
`stopped`, and bills nothing, storage included, while the host is offline), and a status that
changed while no controller ran (found at the restart, dated by the row's `uptime_mins`). Both
were found by the chaos long run of 2026-11-30: the ledger billed a dark host's storage to the
end, and missed the GPU time of a rental that began running while the controller was down."""

from __future__ import annotations

import asyncio

import pytest
from rentwatch.core.billing import Mark, charges, status_marks
from rentwatch.core.lifecycle import Phase
from rentwatch.core.policy import SEED
from rentwatch.engine.hosts.ssh import SSHRunner
from rentwatch.engine.supervisor import Supervisor
from rentwatch.ledger import Ledger

from .fake_market import FakeMarket, campaign, offer
from .ledgers import new_ledger
from .test_supervisor_unit import key as key  # the module's SSH key fixture
from .test_supervisor_unit import kinds, run, verified


def _row(ledger, iid: int) -> dict:
    return next(r for r in ledger.instance_rows() if r["instance_id"] == iid)


def test_a_dark_host_stopped_while_dark_bills_nothing_after_it_went_dark(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        a = sup.attempts[iid]
        market.set(iid, actual="offline", msg="")
        market.t += 10
        went_dark = market.t
        await sup.poll_once()  # host_down: stopped (the fake shows it `stopped` from then on)
        assert ("stop_instance", iid) in market.calls
        market.t += 10
        await sup.poll_once()
        assert a.status == "stopped"
        market.t += 3600  # held stopped for an hour: the market bills nothing, the host is dark
        ledger.record("note", at=market.t, actor="engine", reason="clock", campaign="u")
        row = _row(ledger, iid)
        assert row["storage_usd"] == pytest.approx(
            a.storage_dph * (went_dark - a.created_at) / 3600
        )
        assert row["total_usd"] == pytest.approx(a.charges("running", market.t).total_usd)

    run(key, body, fleet=1)


def _created(gpu_dph: float, storage_dph: float, **tier: float) -> Ledger:
    """A ledger holding instance 1, created at 0 under `running` billing (`tier`: its bid)."""
    led = new_ledger()
    ctx = dict(campaign="c", gpu_dph=gpu_dph, storage_dph=storage_dph, machine_id=1)
    s = led.intent("create", at=0, actor="rule:t", reason="r", detail=dict(tier), **ctx)
    led.outcome(s, at=0, ok=True, instance_id=1, detail={"gpu_billing": "running", **tier})
    return led


def test_status_marks_are_the_ledgers():
    """The pure function and the ledger's view read a status alike: a stopped status after an
    offline one does not bring the storage meter back."""
    marks = [Mark(0, "create", 0.36, 0.036)]
    for at, st in [(100, "loading"), (200, "running"), (300, "offline"), (400, "stopped")]:
        marks += status_marks(at, st)
    marks.append(Mark(400, "stop"))
    led = _created(0.36, 0.036)
    for at, st in [(100, "loading"), (200, "running"), (300, "offline"), (400, "stopped")]:
        led.record("status", at=at, actor="engine", reason=st, instance_id=1, detail={"status": st})
    s = led.intent("stop", at=400, actor="rule:t", reason="r", instance_id=1, campaign="c")
    led.outcome(s, at=400, ok=True)
    led.record("note", at=4000, actor="engine", reason="clock", campaign="c")
    want = charges(marks, "running", 4000)
    [row] = led.instance_rows()
    assert (
        row["storage_usd"] == pytest.approx(want.storage_usd) == pytest.approx(0.036 * 300 / 3600)
    )
    assert row["gpu_usd"] == pytest.approx(want.gpu_usd) == pytest.approx(0.36 * 100 / 3600)
    led.close()


def test_a_status_changed_while_nobody_watched_is_written_down_at_the_restart(key):
    market = FakeMarket([offer(1, 10, 0.36)])
    ledger = new_ledger()

    async def go() -> None:
        first = Supervisor(market, ledger, campaign(), SEED, SSHRunner(key), log=lambda _: None)
        await first.prepare()
        await first.poll_once()
        (iid,) = first.attempts
        market.t += 10
        await first.poll_once()  # loading
        await first.close()  # killed
        market.t += 300
        market.set(iid, actual="running", msg="", uptime_mins=2.0)  # running for 2 min now
        again = Supervisor(market, ledger, campaign(), SEED, SSHRunner(key), log=lambda _: None)
        await again.prepare()
        found = [e for e in kinds(ledger, "status") if e.actor == "reconcile"]
        assert [e.detail["status"] for e in found] == ["running"]
        assert found[0].at == pytest.approx(market.t - 120)
        ledger.record("note", at=market.t, actor="engine", reason="clock", campaign="u")
        row = _row(ledger, iid)
        assert row["gpu_usd"] == pytest.approx(0.36 * 120 / 3600)  # the market's 2 minutes
        a = again.attempts[iid]
        assert row["total_usd"] == pytest.approx(a.charges("running", market.t).total_usd)
        await again.close()

    asyncio.run(go())


def test_a_start_of_running_seen_late_is_dated_by_the_rows_uptime(key):
    """A poll sees a change only when it lists the row: a rental seen running 90 s after it
    began is billed from when it began (the row's `uptime_mins`), as the market bills it."""

    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()  # loading
        market.t += 120
        market.set(iid, actual="running", msg="", uptime_mins=1.5)
        await sup.poll_once()
        (ran,) = [e for e in kinds(ledger, "status") if e.detail["status"] == "running"]
        assert ran.at == pytest.approx(market.t - 90)
        a = sup.attempts[iid]
        ledger.record("note", at=market.t, actor="engine", reason="clock", campaign="u")
        row = _row(ledger, iid)
        assert row["gpu_usd"] == pytest.approx(a.gpu_dph * 90 / 3600)
        assert row["total_usd"] == pytest.approx(a.charges("running", market.t).total_usd)

    run(key, body)


def test_a_resume_and_a_rebid_are_billed_alike_by_the_ledger_and_the_pure_function():
    """An outbid bid rental: the market's stop, a rebid (one refused: it changes nothing), the
    resume by itself, an hour at the raised bid. Replayed from the ledger's events by
    `event_mark` (as a restart does) and read by the ledger's view: the same GPU dollars."""
    from rentwatch.core.billing import event_mark

    led = _created(0.2, 0.01, bid=0.2)
    events = [
        ("status", 100, True, {"status": "running"}),
        ("stop", 700, True, {"by": "market"}),
        ("outbid", 700, True, {"bid": 0.2, "bid_floor": 0.25}),
        ("rebid", 705, False, {"price": 0.9}),  # refused: the bid stays
        ("rebid", 710, True, {"price": 0.3}),
        ("status", 900, True, {"status": "running"}),
        ("resumed", 900, True, {"bid": 0.3}),
    ]
    marks = [Mark(0, "create", 0.2, 0.01)]
    for kind, at, ok, detail in events:
        if kind == "status":
            led.record(
                kind, at=at, actor="engine", reason="s", instance_id=1, campaign="c", detail=detail
            )
            marks += status_marks(at, detail["status"])
            continue
        led.record(
            kind,
            at=at,
            actor="market",
            reason="r",
            instance_id=1,
            campaign="c",
            ok=ok,
            detail=detail,
        )
        mark = event_mark(at, kind, detail) if ok else None
        marks += [mark] if mark is not None else []
    led.record("note", at=4500, actor="engine", reason="clock", campaign="c")
    want = charges(marks, "running", 4500)
    assert want.gpu_usd == pytest.approx((0.2 * 600 + 0.3 * 3600) / 3600)
    [row] = led.instance_rows()
    assert row["gpu_usd"] == pytest.approx(want.gpu_usd)
    assert row["storage_usd"] == pytest.approx(0.01 * 4500 / 3600)
    led.close()


def test_a_row_it_cannot_read_is_billed_its_worst_case_by_the_ledger_and_the_pure_function():
    """A held rental last read `loading` at 100, then dark to the ledger (a NaN in its row):
    from that last good read until its row reads well again at 1900 it is billed as running,
    then as it reads (still loading); later it goes offline and its row is unreadable again
    until it is destroyed: the worst case (online, running) bills storage and GPU to the end.
    The market may bill less, never more: the receipt is an upper bound."""
    from rentwatch.core.billing import event_mark

    led = _created(0.36, 0.036)
    events = [
        ("status", 100, {"status": "loading"}),
        ("unread", 100, {"seen_at": 130.0}),
        ("read_again", 1900, {}),
        ("status", 2500, {"status": "offline"}),
        ("unread", 2500, {"seen_at": 2530.0}),
        ("destroy", 3100, {}),
    ]
    marks = [Mark(0, "create", 0.36, 0.036)]
    for kind, at, detail in events:
        led.record(
            kind, at=at, actor="engine", reason="r", instance_id=1, campaign="c", detail=detail
        )
        mark = event_mark(at, kind, detail) or Mark(at, kind)  # a destroy is a mark as it is
        marks += status_marks(at, detail["status"]) if kind == "status" else [mark]
    led.record("note", at=4000, actor="engine", reason="clock", campaign="c")
    want = charges(marks, "running", 4000)
    assert want.gpu_usd == pytest.approx(0.36 * (1800 + 600) / 3600)
    assert want.storage_usd == pytest.approx(0.036 * 3100 / 3600)
    [row] = led.instance_rows()
    assert row["gpu_usd"] == pytest.approx(want.gpu_usd)
    assert row["storage_usd"] == pytest.approx(want.storage_usd)
    led.close()


def test_a_held_rental_whose_row_cannot_be_read_is_billed_running_until_read_again(key):
    """A booting rental (the market bills no GPU time yet) whose row carries a NaN price for
    some minutes: rentwatch cannot tell that it did not start running, so from its last good
    read until its row reads well again it is billed as running, by the ledger and by the spend
    the header and stop rules read alike, and the ledger says why."""

    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        a = sup.attempts[iid]
        market.t += 10
        await sup.poll_once()  # listed, booting: read well
        last_read = market.t
        market.bad_rows[iid] = {"gpu_dph": float("nan")}
        for _ in range(2):
            market.t += 60
            await sup.poll_once()
        market.bad_rows.clear()
        market.t += 60
        read_again = market.t
        await sup.poll_once()
        assert a.status != "running" and a.life.phase == Phase.BOOTING
        market.t += 60
        ledger.record("note", at=market.t, actor="engine", reason="clock", campaign="u")
        (unread,) = kinds(ledger, "unread")
        assert unread.at == last_read and "unreadable" in unread.reason
        assert [e.at for e in kinds(ledger, "read_again")] == [read_again]
        row = _row(ledger, iid)
        assert row["gpu_usd"] == pytest.approx(a.gpu_dph * (read_again - last_read) / 3600)
        assert row["total_usd"] == pytest.approx(a.charges("running", market.t).total_usd)

    run(key, body, fleet=1)
