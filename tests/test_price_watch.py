"""The engine's side of hosts' price increases against the in-memory market: an increase is
answered once, written before and after the call with both prices, and an accepted one bills
its new price from the contract's end date, alike in the live figures, the ledger's view and a
restart's replay (`core.billing.event_mark`); a stale answer is said and not asked again; an
increase on a rental we do not supervise is left to the person."""

from __future__ import annotations

import pytest
from rentwatch.core.billing import Mark, charges, event_mark, status_marks
from rentwatch.core.worth.price_increase import PriceIncrease
from rentwatch.engine.prices import LOOK_EVERY_S

from .fake_market import FakeMarket, offer
from .ledgers import new_ledger
from .test_billing_gaps import _created
from .test_supervisor_unit import key as key  # the module's SSH key fixture
from .test_supervisor_unit import kinds, run, verified


def _rise(iid: int, t: float, pid: int = 7, new: float = 0.5) -> PriceIncrease:
    return PriceIncrease(pid, iid, 0.3, new, None, None, t + 600.0, t + 86400.0)


def test_a_price_event_is_billed_alike_by_the_ledger_and_the_pure_function():
    led = _created(0.2, 0.01)
    marks = [Mark(0, "create", 0.2, 0.01)]
    for kind, at, detail in [
        ("status", 100, {"status": "running"}),
        ("price", 1000, {"price": 0.5, "old": 0.2}),
        ("price", 1500, {"price": "1e400"}),  # not finite: no new price
        ("price", 1600, {"price": "\x1b[31m9"}),  # not a number: no new price
    ]:
        led.record(
            kind,
            at=at,
            actor="market",
            reason="r",
            instance_id=1,
            campaign="c",
            ok=True,
            detail=detail,
        )
        if kind == "status":
            marks += status_marks(at, detail["status"])
        elif (mark := event_mark(at, kind, detail)) is not None:
            marks.append(mark)
    led.record("note", at=4600, actor="engine", reason="clock", campaign="c")
    want = charges(marks, "running", 4600)
    assert want.gpu_usd == pytest.approx((0.2 * 900 + 0.5 * 3600) / 3600)
    [row] = led.instance_rows()
    assert row["gpu_usd"] == pytest.approx(want.gpu_usd)
    led.close()


def test_an_accepted_increase_is_answered_once_and_billed_from_its_date(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        a = sup.attempts[iid]
        old = a.gpu_dph
        inc = _rise(iid, market.t, new=old * 1.2)
        market.increases.append(inc)
        market.t += LOOK_EVERY_S
        await sup.poll_once()
        assert market.answers == {7: True}  # no sized work to weigh it by: kept
        intent, outcome = kinds(ledger, "price_increase")
        assert (intent.phase, outcome.phase, outcome.ok) == ("intent", "outcome", True)
        assert outcome.detail["old_gpu_dph"] == old and outcome.detail["new_gpu_dph"] == old * 1.2
        assert outcome.detail["takes_effect_at"] == inc.takes_effect_at
        assert intent.actor == "rule:price_accept" and "nothing to weigh" in intent.reason
        assert a.gpu_dph == old  # not yet: the old price runs to the contract's end
        market.t += LOOK_EVERY_S
        await sup.poll_once()
        assert [c for c in market.calls if c[0] == "answer_price_increase"] == [
            ("answer_price_increase", (7, True))
        ]
        market.t = inc.takes_effect_at + 300
        market.set(iid, gpu_dph=old * 1.2)  # the market's row shows it from then
        await sup.poll_once()
        [price] = kinds(ledger, "price")
        assert price.at == inc.takes_effect_at and price.detail["price"] == old * 1.2
        assert a.gpu_dph == old * 1.2
        assert not [e for e in kinds(ledger, "note") if "contradicts" in e.reason]
        ledger.record("note", at=market.t, actor="engine", reason="clock", campaign="u")
        row = next(r for r in ledger.instance_rows() if r["instance_id"] == iid)
        assert row["gpu_usd"] == pytest.approx(a.charges("running", market.t).gpu_usd)

    run(key, body)


def test_a_stale_increase_is_said_and_not_asked_again(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        market.increases.append(_rise(iid, market.t))
        market.answers[7] = False  # answered elsewhere meanwhile, and still listed

        async def listed():
            return [_rise(iid, market.t)]

        market.pending_price_increases = listed
        market.t += LOOK_EVERY_S
        await sup.poll_once()
        market.t += LOOK_EVERY_S
        await sup.poll_once()
        intent, outcome = kinds(ledger, "price_increase")
        assert outcome.ok is False and "no longer pending" in str(outcome.detail)
        assert len([c for c in market.calls if c[0] == "answer_price_increase"]) == 1
        assert sup.attempts[iid].price_due is None

    run(key, body)


def test_an_unreadable_pending_list_costs_nothing_but_a_line(key):
    from rentwatch.core.errors import MalformedAnswer

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        market.fail["pending_price_increases"] = MalformedAnswer("garbled")
        market.t += LOOK_EVERY_S
        await sup.poll_once()
        assert kinds(ledger, "price_increase") == []
        assert sup.attempts[iid].owned

    run(key, body)


def _restartable(key, *offers):
    """A market of `offers`, a new ledger, and supervisors over both: each call of the
    third is the controller started again."""
    from rentwatch.core.policy import SEED
    from rentwatch.engine.hosts.ssh import SSHRunner
    from rentwatch.engine.supervisor import Supervisor

    from .test_supervisor_unit import campaign

    market, ledger = FakeMarket(list(offers)), new_ledger()

    def sup() -> Supervisor:
        return Supervisor(market, ledger, campaign(), SEED, SSHRunner(key), log=lambda _: None)

    return market, ledger, sup


def test_a_restart_keeps_an_accepted_increase_due_and_a_price_in_force(key):
    import asyncio

    market, ledger, sup = _restartable(key, offer(1, 10, 0.3))

    async def go() -> None:
        first = sup()
        await first.prepare()
        iid = await verified(first, market)
        old = first.attempts[iid].gpu_dph
        inc = _rise(iid, market.t, new=old * 1.5)
        market.increases.append(inc)
        market.t += LOOK_EVERY_S
        await first.poll_once()
        assert market.answers == {7: True}
        await first.close()  # killed before the contract's end
        again = sup()
        await again.prepare()
        assert again.attempts[iid].price_due == (inc.takes_effect_at, old * 1.5, 7)
        market.t = inc.takes_effect_at + 60
        market.set(iid, gpu_dph=old * 1.5)
        await again.poll_once()
        [price] = kinds(ledger, "price")
        assert price.at == inc.takes_effect_at
        await again.close()
        third = sup()  # after the price is written: in force, no contradiction said
        await third.prepare()
        market.t += 60
        await third.poll_once()
        assert third.attempts[iid].gpu_dph == old * 1.5
        assert not [e for e in kinds(ledger, "note") if "contradicts" in e.reason]
        ledger.record("note", at=market.t, actor="engine", reason="clock", campaign="u")
        row = next(r for r in ledger.instance_rows() if r["instance_id"] == iid)
        a = third.attempts[iid]
        assert row["gpu_usd"] == pytest.approx(a.charges("running", market.t).gpu_usd)
        await third.close()

    asyncio.run(go())


def test_an_increase_on_a_multi_gpu_rental_is_priced_for_the_whole_machine(key):
    """The market's row is per GPU; the rental is the whole machine's: the rule weighs, the
    ledger writes and the bill carries the per-GPU price times the machine's GPU count."""
    two = [offer(i, i * 10, 0.4, num_gpus=2) for i in (1, 2)]  # $0.20 per GPU

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        a = sup.attempts[iid]
        assert a.num_gpus == 2 and a.gpu_dph == pytest.approx(0.4)
        inc = PriceIncrease(7, iid, 0.2, 0.24, None, None, market.t + 600.0, market.t + 86400.0)
        market.increases.append(inc)
        market.t += LOOK_EVERY_S
        await sup.poll_once()
        assert market.answers == {7: True}
        intent, outcome = kinds(ledger, "price_increase")
        assert outcome.detail["old_gpu_dph"] == pytest.approx(0.4)
        assert outcome.detail["new_gpu_dph"] == pytest.approx(0.48)
        market.t = inc.takes_effect_at + 300
        market.set(iid, gpu_dph=0.48)  # the market's row shows the machine's new price
        await sup.poll_once()
        [price] = kinds(ledger, "price")
        assert price.detail["price"] == pytest.approx(0.48) and a.gpu_dph == pytest.approx(0.48)
        assert not [e for e in kinds(ledger, "note") if "contradicts" in e.reason]

    run(key, body, market=FakeMarket(two))


def test_a_multi_gpu_rental_adopted_after_a_restart_is_priced_for_the_whole_machine(key):
    """An adopted rental has no offer: its GPU count is the market's row's."""
    import asyncio

    market, ledger, sup = _restartable(key, offer(1, 10, 0.4, num_gpus=2))

    async def go() -> None:
        first = sup()
        await first.prepare()
        iid = await verified(first, market)
        await first.close()
        again = sup()
        await again.prepare()
        a = again.attempts[iid]
        assert a.offer is None and a.num_gpus == 2
        market.increases.append(
            PriceIncrease(7, iid, 0.2, 0.24, None, None, market.t + 600.0, market.t + 86400.0)
        )
        market.t += LOOK_EVERY_S
        await again.poll_once()
        _, outcome = kinds(ledger, "price_increase")
        assert outcome.detail["new_gpu_dph"] == pytest.approx(0.48)
        await again.close()

    asyncio.run(go())
