"""The supervisor against the in-memory fake market: each decision type, each stop rule, a
reconcile after a crash, a changed host key, budget and deadline. Each runs in well under a
second (no simulator, no SSH, no sleeping: the fake's clock is moved by hand)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from rentwatch.core.campaign import Campaign
from rentwatch.core.decisions import Abandon, Create, Finish, StartPreflight, Stop, Verify
from rentwatch.core.lifecycle import Phase
from rentwatch.core.policy import NAIVE, SEED, Policy
from rentwatch.core.preflight.verdict import Throttle, Verdict
from rentwatch.engine.hosts.ssh import HostKeyChanged, RunResult, SSHRunner, load_or_create_key
from rentwatch.engine.intents import CreateIntent, StartIntent, StopIntent
from rentwatch.engine.operator import HUMAN_RECENT_S, STARTED_BY_PERSON
from rentwatch.engine.rentals import apply
from rentwatch.engine.rounds import rounds
from rentwatch.engine.session import Session
from rentwatch.engine.supervisor import Supervisor
from rentwatch.engine.updates import Broken, GaveUp
from rentwatch.ledger import Ledger
from rentwatch.market.errors import MarketUnavailable
from rentwatch.market.protocol import Market

from .fake_market import FakeMarket, offer
from .fake_market import campaign as fake_campaign
from .ledgers import new_ledger

OFFERS = [offer(1, 10, 0.30), offer(2, 20, 0.20), offer(3, 30, 0.25), offer(4, 40, 0.90)]


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_or_create_key(tmp_path_factory.mktemp("k") / "key")


def campaign(**more: Any) -> Campaign:
    return fake_campaign("u", **more)


class KeyChangedRunner(SSHRunner):
    """An SSH runner whose host answers with another key than the pinned one."""

    async def run(
        self, instance_id: int, host: str, port: int, command: str, **kw: Any
    ) -> RunResult:
        raise HostKeyChanged(f"instance {instance_id}'s host key changed (a -> b): refused")


def run(
    key: Any,
    body: Callable[[Supervisor, FakeMarket, Ledger], Awaitable[None]],
    market: FakeMarket | None = None,
    policy: Policy = SEED,
    ledger: Ledger | None = None,
    runner: type[SSHRunner] = SSHRunner,
    **camp: Any,
) -> Ledger:
    market = market or FakeMarket(list(OFFERS))
    ledger = ledger or new_ledger()

    async def go() -> None:
        m: Market = market
        sup = Supervisor(m, ledger, campaign(**camp), policy, runner(key), log=lambda _: None)
        await sup.prepare()
        try:
            await body(sup, market, ledger)
        finally:
            await sup.close()

    asyncio.run(go())
    return ledger


def kinds(ledger: Ledger, kind: str) -> list[Any]:
    return [e for e in ledger.events() if e.kind == kind]


def only(ds: list[Any], t: type) -> list[Any]:
    return [d for d in ds if isinstance(d, t)]


async def to_running(sup: Supervisor, market: FakeMarket, iid: int) -> list[Any]:
    market.set(iid, actual="running", msg="")
    market.t += 10
    return await sup.poll_once()


def test_create_carries_the_cheapest_fit_offer(key):
    async def body(sup, market, ledger):
        ds = await sup.poll_once()
        (c,) = only(ds, Create)
        # offer 4 is over max_dph; 2 is the cheapest of the rest
        assert c.offer is not None and c.offer.id == 2 and "cheapest" in c.why
        assert [a.machine_id for a in sup.attempts.values()] == [20]
        assert kinds(ledger, "offer_chosen")[0].machine_id == 20
        creates = kinds(ledger, "create")
        assert [e.phase for e in creates] == ["intent", "outcome"] and creates[1].ok

    run(key, body)


def test_quarantined_and_held_machines_are_never_chosen(key):
    async def body(sup, market, ledger):
        sup.fleet.quarantine[20] = "bad before"
        ds = await sup.poll_once()
        assert only(ds, Create)[0].offer.machine_id == 30
        market.t += 10
        ds = await sup.poll_once()  # fleet 2: the second create skips machine 30, now held
        assert only(ds, Create)[0].offer.machine_id == 10

    run(key, body, fleet=2)


def test_offers_with_a_negative_or_non_finite_price_are_unfit(key):
    bad = [offer(1, 10, -0.5), offer(2, 20, float("nan")), offer(3, 30, 0.4)]
    # cheaper, but a storage or bandwidth price that is negative or not finite
    bad += [offer(5, 50, 0.1, storage_cost=-1.0), offer(6, 60, 0.1, storage_cost=math.inf)]
    bad += [offer(7, 70, 0.1, storage_cost=math.nan), offer(8, 80, 0.1, inet_down_cost=-0.02)]
    bad += [offer(9, 90, 0.1, inet_up_cost=math.inf)]

    async def body(sup, market, ledger):
        ds = await sup.poll_once()
        assert only(ds, Create)[0].offer.id == 3

    run(key, body, market=FakeMarket(bad))


def test_a_frozen_pull_is_abandoned_destroyed_and_quarantined(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()  # listed: status line 'Pulling fs layer'
        market.t += 6 * 60 + 5
        ds = await sup.poll_once()
        (ab,) = only(ds, Abandon)
        assert ab.failure_class == "freeze" and ab.quarantine is not None
        assert ab.quarantine.machine_id == 20 and ab.quarantine.scope == "campaign"
        assert sup.attempts[iid].life.phase == Phase.DESTROYED
        assert ("destroy_instance", iid) in market.calls
        assert sup.fleet.quarantine == {20: ab.reason}
        assert kinds(ledger, "quarantine")[0].machine_id == 20
        assert only(ds, Create)[0].offer.machine_id != 20  # replaced at once, elsewhere

    run(key, body)


def test_a_destroy_that_failed_is_asked_again_by_the_rules(key):
    """The market refuses an abandon's destroy: the rental is given up but still billing.
    The next poll's rules ask for its destroy again (rule:abandon), and its machine is
    quarantined once, by the first decision only."""

    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()
        market.t += 6 * 60 + 5
        market.fail["destroy_instance"] = MarketUnavailable("the market timed out")
        ds = await sup.poll_once()
        assert only(ds, Abandon)[0].rule == "rule:freeze"
        assert sup.attempts[iid].life.phase == Phase.ABANDONED, "its destroy failed"
        market.t += 10
        ds = await sup.poll_once()
        (again,) = [d for d in only(ds, Abandon) if d.instance_id == iid]
        assert again.rule == "rule:abandon" and again.quarantine is None
        assert sup.attempts[iid].life.phase == Phase.DESTROYED
        assert [c for c in market.calls if c == ("destroy_instance", iid)] == [
            ("destroy_instance", iid)
        ] * 2
        assert len(kinds(ledger, "quarantine")) == 1
        market.t += 10
        ds = await sup.poll_once()  # destroyed: nothing more is asked of it
        assert not [d for d in only(ds, Abandon) if d.instance_id == iid]

    run(key, body)


def test_a_fatal_status_line_is_abandoned_at_once(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.set(iid, msg="Error response from daemon: manifest unknown")
        market.t += 10
        ds = await sup.poll_once()
        assert only(ds, Abandon)[0].failure_class == "fatal"

    run(key, body)


def test_preflight_then_verify_then_finish(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()
        market.set(iid, actual="running", msg="")
        market.t += 10
        ds = await sup.poll_once()
        a = sup.attempts[iid]
        assert only(ds, StartPreflight) and a.life.phase == Phase.VERIFYING
        assert a.preflight_task is not None
        a.preflight_task.cancel()
        a.verdict = Verdict(True, None, "bf16 matmul checked", 70.0, 71.0)
        market.t += 10
        ds = await sup.poll_once()
        assert only(ds, Verify) and a.passed_preflight and a.life.phase == Phase.VERIFIED
        assert kinds(ledger, "preflight_passed")[0].detail["by_preflight"] is True
        market.t += 10
        ds = await sup.poll_once()
        assert only(ds, Finish)[0].ok and sup.finished is not None

    run(key, body)


def test_a_failed_preflight_is_abandoned_for_its_class(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        await to_running(sup, market, iid)
        a = sup.attempts[iid]
        a.preflight_task.cancel()
        a.verdict = Verdict(False, "cuda_error", "CUDA error: no kernel image")
        market.t += 10
        ds = await sup.poll_once()
        assert only(ds, Abandon)[0].failure_class == "cuda_error"
        assert a.life.phase == Phase.DESTROYED

    run(key, body)


async def verified(sup: Supervisor, market: FakeMarket) -> int:
    """The first attempt, created, running and proven; its id."""
    await sup.poll_once()
    iid = next(iter(sup.attempts))
    await to_running(sup, market, iid)
    a = sup.attempts[iid]
    a.preflight_task.cancel()
    a.verdict = Verdict(True, None, "ok", 70.0, 71.0)
    market.t += 10
    await sup.poll_once()
    assert a.life.phase == Phase.VERIFIED and a.passed_preflight
    a.tend_task.cancel()
    return iid


def test_a_verified_host_going_down_is_stopped_never_destroyed(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        market.set(iid, actual="exited")
        market.t += 10
        ds = await sup.poll_once()
        (st,) = only(ds, Stop)
        assert st.rule == "rule:host_down" and not only(ds, Abandon)
        assert ("stop_instance", iid) in market.calls
        assert ("destroy_instance", iid) not in market.calls

    run(key, body, fleet=2)


def test_a_throttled_host_is_stopped_under_a_policy_that_says_so(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        sup.attempts[iid].throttle = Throttle(True, "clocks down 40%", 0.6, ("HW_SLOWDOWN",))
        market.t += 10
        ds = await sup.poll_once()
        assert only(ds, Stop)[0].rule == "rule:throttle"

    run(key, body, policy=dataclasses.replace(SEED, stop_on_throttle=True), fleet=2)


def test_an_idle_host_is_stopped_once_the_work_is_done(key):
    from rentwatch.core.campaign import Job

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        job = sup.jobs.jobs[0]
        sup.jobs.take(iid, market.t)
        sup.jobs.finished(job, 0, market.t)  # the work is done; one job failed elsewhere
        sup.jobs.jobs[1].status = "failed"
        market.set(iid, gpu_util=1.0)
        market.t += 10
        await sup.poll_once()
        market.t += SEED.idle_grace_s + 10
        ds = await sup.poll_once()
        assert any(isinstance(d, Stop) and d.rule == "rule:idle" for d in ds)

    jobs = (Job(name="a", run="true"), Job(name="b", run="true"))
    # the fake market's hosts answer no SSH: over the idle grace the silent rule would stop
    # this one first (silence is judged by answers), so it is off here
    run(key, body, policy=dataclasses.replace(SEED, silent_stop_s=None), jobs=jobs, fleet=2)


def test_a_changed_host_key_stops_and_quarantines_the_host(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        a = sup.attempts[iid]
        with pytest.raises(HostKeyChanged):
            await sup.link.run(a, "touch ~/.rentwatch/heartbeat")
        assert a.untrusted and kinds(ledger, "host_key_changed")
        market.t += 10
        ds = await sup.poll_once()
        (st,) = only(ds, Stop)
        assert st.rule == "rule:host_key" and st.quarantine is not None
        assert (
            sup.fleet.quarantine.get(a.machine_id) and ("destroy_instance", iid) not in market.calls
        )

    run(key, body, runner=KeyChangedRunner, fleet=2)


def test_budget_ends_the_campaign(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        await to_running(sup, market, iid)
        market.t += 3 * 3600  # $0.20/h for 3 h passes a $0.50 budget
        ds = await sup.poll_once()
        (f,) = only(ds, Finish)
        assert f.rule == "rule:budget" and not f.ok and not only(ds, Create)

    run(key, body, budget_usd=0.5)


def test_the_deadline_counts_from_the_first_start(key):
    led = new_ledger()
    market = FakeMarket(list(OFFERS))

    async def first(sup, market, ledger):
        await sup.poll_once()

    run(key, first, market=market, ledger=led, deadline_min=30)
    market.t += 20 * 60

    async def second(sup, market, ledger):  # a restart 20 minutes in: 10 minutes are left
        assert not only(await sup.poll_once(), Finish)
        market.t += 11 * 60
        (f,) = only(await sup.poll_once(), Finish)
        assert f.rule == "rule:deadline"

    run(key, second, market=market, ledger=led, deadline_min=30)


def test_max_creates_and_no_offers_end_the_campaign(key):
    async def body(sup, market, ledger):
        ds = await sup.poll_once()
        (f,) = only(ds, Finish)
        assert f.rule == "rule:no_offers"

    run(key, body, market=FakeMarket([offer(4, 40, 0.90)]))

    async def body2(sup, market, ledger):
        (f,) = only(await sup.poll_once(), Finish)
        assert f.rule == "rule:max_creates"

    run(key, body2, max_creates=0)


def test_trust_running_verifies_without_a_preflight(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        ds = await to_running(sup, market, iid)
        (v,) = only(ds, Verify)
        a = sup.attempts[iid]
        assert not v.by_preflight and a.life.phase == Phase.VERIFIED and not a.passed_preflight

    run(key, body, policy=dataclasses.replace(NAIVE, preflight_after_s=0))


def test_reconcile_after_a_crash_settles_the_calls_and_adopts(key):
    led = new_ledger()
    market = FakeMarket(list(OFFERS))
    # the dead controller's last words: a create sent (answer never seen), a destroy sent
    create = led.intent(
        "create",
        at=market.t - 100,
        actor="rule:replace",
        reason="r",
        campaign="u",
        detail={"label": "rw:u:abc"},
    )
    gone = led.intent(
        "destroy",
        at=market.t - 50,
        actor="rule:freeze",
        reason="r",
        campaign="u",
        instance_id=4999,
    )
    iid = market.adopt("rw:u:abc", OFFERS[1], actual="running", msg="")
    market.adopt("someone-else", OFFERS[2])

    async def body(sup, market, ledger):
        assert list(sup.attempts) == [iid]  # only this campaign's
        assert sup.attempts[iid].life.phase == Phase.RUNNING
        assert sup.fleet.creates == 1
        outcomes = {e.intent_seq: e for e in ledger.events() if e.phase == "outcome"}
        assert outcomes[create].ok and outcomes[create].instance_id == iid
        assert outcomes[gone].ok  # not listed: the destroy took effect
        assert kinds(ledger, "adopted")[0].instance_id == iid

    run(key, body, market=market, ledger=led)


def test_an_illegal_lifecycle_move_is_written_down_as_an_error(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        await sup.apply(StartIntent(iid))  # a start of a verified instance: not a legal move
        (err,) = kinds(ledger, "error")
        assert err.instance_id == iid and "verified -> booting" in err.reason
        assert sup.attempts[iid].life.phase == Phase.VERIFIED

    run(key, body, fleet=2)


def test_a_host_fault_and_a_rule_stopping_at_once_stop_it_once(key):
    class SlowStops(FakeMarket):
        async def stop_instance(self, instance_id, on_try=None):
            await asyncio.sleep(0.01)  # the call is in flight when the other stop comes
            return await super().stop_instance(instance_id, on_try)

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        a = sup.attempts[iid]
        sup.writer.emit(
            Broken(a, "rule:xid", "fatal XID 79", "xid", {})
        )  # the rules stop it this poll
        await asyncio.gather(
            sup.poll_once(),
            sup.actions.stop(a, "rule:host_down", "the poll saw it go down"),
        )
        assert market.calls.count(("stop_instance", iid)) == 1
        assert a.life.phase == Phase.STOPPED and kinds(ledger, "error") == []

    run(key, body, market=SlowStops(list(OFFERS)), fleet=2)


def test_a_session_records_campaign_end_and_closes(key, tmp_path: Path):
    market = FakeMarket(list(OFFERS))
    led = Ledger(tmp_path / "l.duckdb")

    async def go() -> None:
        s = Session(Supervisor(market, led, campaign(), SEED, SSHRunner(key), log=lambda _: None))
        sup = await s.start()
        await sup.poll_once()
        await s.release("rule:campaign_end", "test over")
        await s.end("test over")

    asyncio.run(go())
    assert [e.kind for e in led.events() if e.kind.startswith("campaign")] == [
        "campaign_start",
        "campaign_end",
    ]
    assert ("aclose", None) in market.calls
    assert any(c[0] == "destroy_instance" for c in market.calls)  # unproven: destroyed
    led.close()


def test_the_dashboard_counts_duds_as_the_receipt_does(key):
    """One definition of a dud, a rental that never delivered through its host's fault: a
    frozen pull abandoned is one; a booting one cancelled at the campaign's end is not, and is
    counted apart, on screen and in the receipt alike ([AC] 7)."""
    from rentwatch.views.snapshot import snapshot

    async def body(sup, market, ledger):
        await sup.poll_once()
        market.t += 10
        await sup.poll_once()
        market.t += 6 * 60 + 5
        await sup.poll_once()  # the first froze: abandoned, replaced
        await sup.release_all("rule:campaign_end", "over")  # the replacement: cancelled
        snap = snapshot(sup, market.t)
        receipt = ledger.receipt()[0]
        assert snap.duds == receipt["duds"] == 1
        assert snap.cancelled == receipt["cancelled"] == 1
        assert snap.stopped_by_market == receipt["stopped_by_market"] == 0
        assert snap.dud_usd == pytest.approx(receipt["dud_usd"], abs=1e-6)

    run(key, body)


def test_an_instance_left_out_of_a_list_is_unseen_not_lost(key):
    """[J] One missing row: still held and asked for directly; written off only when the
    market says it no longer exists; released at the end (no leak)."""

    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()
        market.hidden.add(iid)
        market.t += 10
        shown = market.calls.count(("show_instance", iid))  # the create's own look among them
        await sup.poll_once()
        a = sup.attempts[iid]
        assert a.life.phase == Phase.BOOTING
        assert market.calls.count(("show_instance", iid)) > shown  # asked for directly
        assert kinds(ledger, "unseen") and not kinds(ledger, "lost")
        await sup.release_all("rule:campaign_end", "over")
        assert ("destroy_instance", iid) in market.calls  # released, not leaked
        # a second one the market really lost: written off on its own word
        market.hidden.clear()

    run(key, body)

    async def gone(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        market.t += 10
        await sup.poll_once()
        market.boxes[iid].intended = "destroyed"  # gone from the market, not by us
        market.t += 10
        await sup.poll_once()
        assert sup.attempts[iid].life.phase == Phase.LOST and kinds(ledger, "lost")

    run(key, gone)


def test_a_create_answer_naming_a_held_verified_instance_is_not_believed(key):
    """[J] A create answer with the id of a verified instance: resolved by the label, never
    any action on the verified one."""

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        proven = sup.attempts[iid]
        market.lie_create_id = iid
        market.t += 10
        assert (await sup.apply(CreateIntent())).done
        assert sup.attempts[iid] is proven and proven.life.phase == Phase.VERIFIED
        new = [i for i in sup.attempts if i != iid]
        assert new and market.boxes[new[-1]].label.startswith("rw:u:")  # the real rental, held
        for _ in range(60):  # let everything else fail and be abandoned
            market.t += 60
            await sup.poll_once()
        assert ("destroy_instance", iid) not in market.calls

    run(key, body, fleet=1)


def test_one_bad_row_costs_one_row_not_the_poll(key):
    """[J] A NaN price on one row: that row skipped and recorded; the others supervised."""

    async def body(sup, market, ledger):
        await sup.poll_once()
        market.t += 10
        await sup.poll_once()
        first, second = list(sup.attempts)
        market.bad_rows[first] = {"gpu_dph": float("nan")}
        market.set(second, actual="running", msg="")
        market.t += 10
        await sup.poll_once()
        assert sup.attempts[second].life.phase in (Phase.RUNNING, Phase.VERIFYING)
        assert sup.attempts[first].life.phase == Phase.BOOTING  # held, not lost
        (bad,) = kinds(ledger, "bad_row")
        assert bad.instance_id == first and "gpu_dph" in bad.reason

    run(key, body, fleet=2)


def test_no_create_could_take_spend_past_the_budget(key):
    """[J] What was spent, what every unproven attempt in flight may still bill (its price over
    the rest of the boot deadline) and the next create's share stay within the budget."""
    many = [offer(i, 100 + i, 0.45) for i in range(1, 11)]

    async def body(sup, market, ledger):
        for _ in range(4):
            await sup.poll_once()
            market.t += 10
        # $0.45/h over a 45-minute boot deadline: $0.3375 at risk each; $1.00 carries two
        assert len(sup.attempts) == 2
        assert not only(await sup.poll_once(), Create)

    run(key, body, market=FakeMarket(many), fleet=10, budget_usd=1.0)


def test_spend_counts_the_highest_price_the_market_showed(key):
    """[J] A rental billed at ten times its offer's price: flagged, and the budget counts the
    higher price, so the campaign ends before it overshoots."""

    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        await to_running(sup, market, iid)
        market.bad_rows[iid] = {"gpu_dph": 2.0}  # the offer said $0.20/h
        market.t += 10
        await sup.poll_once()
        (note,) = [e for e in kinds(ledger, "note") if "contradicts" in e.reason]
        assert note.instance_id == iid
        market.t += 35 * 60  # $0.12 at the offer's price, $1.17 at the billed one
        (f,) = only(await sup.poll_once(), Finish)
        assert f.rule == "rule:budget"

    run(key, body, budget_usd=1.0)


def test_a_rental_carrying_our_label_that_we_do_not_hold_is_adopted(key):
    """[J] The create answer named a held id and the new rental was not listed yet: refused at
    first; once it shows up carrying our label it is adopted and on the ledger."""

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        real = market.next_id
        market.lie_create_id, market.hidden = iid, {real}
        assert not (await sup.apply(CreateIntent())).done
        assert real not in sup.attempts
        market.hidden.clear()
        market.t += 10
        await sup.poll_once()
        assert real in sup.attempts and sup.attempts[iid].life.phase == Phase.VERIFIED
        assert real in {r["instance_id"] for r in ledger.instance_rows()}

    run(key, body)


def test_a_restart_adopts_our_rental_even_from_a_bad_row(key):
    """[J] A row of ours with a NaN price at a restart: adopted (held, released at the end),
    its price taken only where finite, so the spend the budget reads stays a number."""
    led = new_ledger()
    market = FakeMarket(list(OFFERS))
    iid = market.adopt("rw:u:nan", OFFERS[1], actual="running", msg="")
    market.bad_rows[iid] = {"gpu_dph": float("nan"), "storage_total_cost": float("inf")}
    # its create's intent is in the ledger (the answer was lost): the label is this ledger's
    led.record(
        "create",
        at=0.0,
        actor="engine",
        reason="create",
        phase="intent",
        detail={"label": "rw:u:nan"},
        campaign="u",
    )

    async def body(sup, market, ledger):
        assert iid in sup.attempts
        market.t += 600  # ten minutes of a running GPU at the row's price
        await sup.poll_once()
        assert math.isfinite(sup.fleet.spent(market.gpu_billing, market.t))
        assert kinds(ledger, "bad_row")[0].instance_id == iid
        await sup.release_all("rule:campaign_end", "over")
        assert ("destroy_instance", iid) in market.calls

    run(key, body, market=market, ledger=led)


def test_a_fresh_ledger_owns_none_of_the_rentals_another_ledger_made_under_its_name(key):
    """Two setups on one account, each with its own ledger, run a campaign of the same name:
    one's rentals carry the name's label but no create of this ledger, so this controller
    never adopts, stops or destroys them (they are the other's)."""
    market = FakeMarket(list(OFFERS))
    theirs = market.adopt("rw:u:0a1b2c3d4e", OFFERS[1], actual="running", msg="")

    async def body(sup, market, ledger):
        assert theirs not in sup.attempts
        market.t += 60
        await sup.poll_once()
        await sup.release_all("rule:campaign_end", "over")
        assert theirs not in sup.attempts
        touched = [c for c in market.calls if len(c) > 1 and c[1] == theirs]
        assert touched == [] and not ledger.instance_history(theirs)

    run(key, body, market=market)


def test_a_host_a_person_started_is_not_drained_a_minute_later(key):
    """The drained rule stops a proven host with no job left; one the operator has just started
    by hand waits HUMAN_RECENT_S first (the idle rule, on its GPU, still applies)."""

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        a = sup.attempts[iid]
        free = sup.decider.snapshot(market.t).attempts[0].free_since
        assert free is not None and free <= market.t
        a.human_at, a.human_act = market.t, STARTED_BY_PERSON
        assert sup.decider.snapshot(market.t).attempts[0].free_since == market.t + HUMAN_RECENT_S

    run(key, body, fleet=1)


def test_a_stopped_instances_detail_still_asks_the_market_for_its_logs(key):
    from rentwatch.views.detail import build

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        await sup.actions.stop(sup.attempts[iid], "human", "a look at a stopped one")
        d = await build(sup, iid, logs=True)
        assert "gone" not in d.market_logs_error  # stopped is not gone: its logs are asked for
        assert ("request_logs", iid) in market.calls

    run(key, body, fleet=1)


def test_a_hosts_tending_that_died_is_said_and_started_again(key):
    """Issue 30: the supervisor watches its tasks. A proven host's tending that ended by an
    error its guards did not catch is noted in the ledger and tended again on the next poll;
    one cancelled on purpose is left alone."""

    async def body(sup, market, ledger):
        iid = await verified(sup, market)  # its tending cancelled, as on purpose
        a = sup.attempts[iid]
        cancelled = a.tend_task
        await asyncio.sleep(0)
        market.t += 10
        await sup.poll_once()
        assert a.tend_task is cancelled and cancelled.cancelled(), "cancelled, yet started again"
        tended: list[int] = []

        async def dies(att):
            tended.append(att.instance_id)
            if len(tended) == 1:
                raise RuntimeError("a bug of ours")
            await asyncio.sleep(3600)

        sup.tender.tend = dies
        a.tend_task = asyncio.create_task(dies(a))
        await asyncio.sleep(0)
        market.t += 10
        await sup.poll_once()
        await asyncio.sleep(0)
        assert tended == [iid, iid] and not a.tend_task.done()
        (note,) = [e for e in kinds(ledger, "note") if "tending" in e.reason]
        assert "RuntimeError: a bug of ours; tended again" in note.reason
        assert note.instance_id == iid and note.actor == "engine"
        a.tend_task.cancel()

    run(key, body, fleet=2)


def test_one_poll_loop_goes_on_past_an_error_only_when_told(key):
    """`engine.rounds` is the one poll loop: the dashboard's engine gives it an error
    handler and it polls on; headless gives none and the error ends the run."""

    async def body(sup, market, ledger):
        real = sup.poll_once
        polls: list[int] = []
        errors: list[str] = []
        after: list[int] = []

        async def flaky():
            polls.append(len(polls))
            if len(polls) == 2:
                raise RuntimeError("a poll that failed")
            return await real()

        sup.poll_once = flaky
        await rounds(
            sup,
            lambda: len(polls) >= 4,
            lambda: after.append(len(polls)),
            lambda e: errors.append(str(e)),
        )
        assert errors == ["a poll that failed"] and after == [1, 2, 3, 4]
        polls.clear()
        with pytest.raises(RuntimeError, match="a poll that failed"):
            await rounds(sup, lambda: len(polls) >= 4)
        assert len(polls) == 2

    run(key, body)


def test_ending_a_finished_campaign_destroys_its_stopped_rentals(key):
    """Issue 29, item 1: a campaign ended (its rentals stopped, their storage billing on);
    the person's "end and destroy everything" destroys them from the engine, not only what
    is live, and each destroy is the person's."""
    from rentwatch.engine.ending import end_campaign

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        done = await end_campaign(sup, destroy=False)
        assert done.lines == (f"stopped verified i:{iid}",) and done.acted_on == (iid,)
        assert market.boxes[iid].intended == "stopped"
        assert sup.attempts[iid].life.phase == Phase.STOPPED
        done = await end_campaign(sup, destroy=True, typed="u")
        assert done.lines == (f"destroyed verified i:{iid}",) and done.destroyed == (iid,), done
        assert market.boxes[iid].intended == "destroyed"
        (d,) = [e for e in kinds(ledger, "destroy") if e.phase == "outcome" and e.ok]
        assert d.instance_id == iid and d.actor == "human"

    run(key, body)


def test_a_create_in_flight_at_the_end_is_ended_as_it_lands(key):
    """A create sent just before a person ended the campaign, answered just after: the end's
    sweep of the fleet could not see it, and it outlived the end, billing unheld (test_end_cli
    met it as a flake). It is given up and destroyed as it lands, in the person's name."""
    from rentwatch.engine.ending import end_campaign

    async def body(sup, market, ledger):
        sent, answer = asyncio.Event(), asyncio.Event()
        real = market.create_instance

        async def slow_create(*args: Any, **kw: Any) -> Any:
            sent.set()
            await answer.wait()
            return await real(*args, **kw)

        market.create_instance = slow_create
        poll = asyncio.create_task(sup.poll_once())
        await sent.wait()
        assert (await end_campaign(sup, destroy=False)).lines == ()  # nothing held yet
        answer.set()
        await poll
        (iid,) = market.boxes
        assert market.boxes[iid].intended == "destroyed"
        assert sup.attempts[iid].life.phase == Phase.DESTROYED
        (d,) = [e for e in kinds(ledger, "destroy") if e.phase == "outcome" and e.ok]
        assert d.instance_id == iid and d.actor == "human" and "after the end" in d.reason
        (g,) = kinds(ledger, "abandon")
        assert g.actor == "human" and g.instance_id == iid

    run(key, body)


def test_close_never_hangs_on_a_task_that_lost_its_cancel(key, monkeypatch):
    """A detached run's exit hung: a host's tend task had lost its cancel (Python 3.11's
    wait_for drops one landing as its inner call ends) and slept on forever. Close cancels
    again; a task that still will not end is said and left behind."""
    from rentwatch.engine import supervisor as sv

    monkeypatch.setattr(sv, "CLOSE_WAIT_S", 0.05)

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        a = sup.attempts[iid]
        swallowed: list[int] = []

        async def loses_one_cancel():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                swallowed.append(1)  # as if the cancel had gone astray
            await asyncio.sleep(3600)  # cancelled again by close: ends here

        release = asyncio.Event()

        async def never_ends():
            while not release.is_set():
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    continue

        a.tend_task = asyncio.create_task(loses_one_cancel())
        await asyncio.sleep(0)
        await asyncio.wait_for(sup.close(), 5)
        assert swallowed == [1] and a.tend_task.cancelled()
        a.tend_task = asyncio.create_task(never_ends())
        await asyncio.sleep(0)
        said: list[str] = []
        sup.journal.log = said.append
        await asyncio.wait_for(sup.close(), 5)
        assert any("would not end" in s for s in said), said
        release.set()  # the test's own: let it end now
        a.tend_task.cancel()
        await asyncio.wait_for(a.tend_task, 5)

    run(key, body)


def test_a_loop_whose_cancel_was_lost_still_ends():
    from rentwatch.engine.rounds import raise_if_cancelled

    async def main() -> list[str]:
        seen: list[str] = []

        async def loop() -> None:
            while True:
                raise_if_cancelled()
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    seen.append("lost")  # a library swallowed it; the task still cancelling

        t = asyncio.create_task(loop())
        await asyncio.sleep(0.02)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(t, 2)
        return seen

    assert asyncio.run(main()) == ["lost"]


def test_every_figure_agrees_at_one_instant(key, tmp_path):
    """Issue 29, item 3: the bar, the table's billed column, the detail screen, the receipt
    (`rentwatch receipt`, the receipt screen), the ledger's `receipt` view and
    `instances.total_usd` compute spend to the same moment, to the cent. The fake market's
    clock stands still between polls: one instant, a fleet of booting, verified, stopped
    and abandoned rentals, with storage billing on the stopped one."""
    from rentwatch.views.detail import build
    from rentwatch.views.snapshot import snapshot

    async def body(sup, market, ledger):
        iid = await verified(sup, market)  # verified, working
        for _ in range(3):  # more creates: one frozen pull abandoned, one stopped by hand
            market.t += 400
            await sup.poll_once()
        others = [i for i in sup.attempts if i != iid]
        alive = [
            i for i in others if sup.attempts[i].life.phase in (Phase.BOOTING, Phase.REQUESTED)
        ]
        if alive:
            market.set(alive[0], actual="running", msg="")
        market.t += 900
        await sup.poll_once()
        await sup.apply(StopIntent(iid, "stopped by hand"))  # storage bills on
        market.t += 1800
        await sup.poll_once()
        now = sup.now()  # the instant: no poll, no clock movement below
        bar = snapshot(sup, now)
        (receipt,) = ledger.receipt(sup.campaign.name)
        view = ledger.query("select total_usd from receipt").rows[0][0]
        rows = {r["instance_id"]: r for r in ledger.instance_rows()}
        per = dict(ledger.query("select instance_id, total_usd from instances").rows)
        assert len(rows) >= 3 and any(r["stopped_at"] for r in rows.values())
        for figure in (receipt["total_usd"], view, sum(per.values())):
            assert figure == pytest.approx(bar.spent_usd, abs=0.005)
        assert bar.spent_usd > 0.05, "nothing billed: the comparison would prove nothing"
        compared = 0
        for inst in bar.instances:
            if inst.instance_id in per:
                assert inst.billed_usd == pytest.approx(per[inst.instance_id], abs=0.005)
                detail = await build(sup, inst.instance_id, logs=False)
                assert detail.total_usd == pytest.approx(per[inst.instance_id], abs=0.005)
                compared += 1
        assert compared == len(per) >= 3

    run(key, body, fleet=2, ledger=Ledger(tmp_path / "l.duckdb"))


def test_one_release_rule_keeps_the_proven_and_destroys_the_rest(key):
    """`release(keep_proven)` is the one rule every end uses: a proven rental stopped (or, with
    keep_proven off, destroyed through the person's confirmed destroy), one never proven given
    up as cancelled and destroyed."""
    from rentwatch.engine.release import release

    async def body(sup, market, ledger):
        kept = await verified(sup, market)
        sup.operator.resize(3)
        await sup.poll_once()  # two more, booting: never proven
        booting = [i for i in sup.attempts if i != kept]
        assert booting
        given_up = sup.attempts[booting[0]]  # given up already: destroyed, not given up again
        apply(sup.journal, GaveUp(given_up, sup.now(), "engine", "test", "timeout"))
        got = await release(sup, sup.fleet.held(), "engine", "the end", keep_proven=True)
        done = [r.message for r in got]
        assert f"stopped verified i:{kept}" in done
        assert {f"destroyed unverified i:{i}" for i in booting} <= set(done)
        assert market.boxes[kept].intended == "stopped"
        assert all(market.boxes[i].intended == "destroyed" for i in booting)
        cancelled = [e for e in kinds(ledger, "abandon") if e.detail.get("class") == "cancelled"]
        assert {e.instance_id for e in cancelled} == set(booting[1:])
        (gone,) = await release(sup, sup.fleet.on_market(), "human", "the end", keep_proven=False)
        assert gone.message == f"destroyed verified i:{kept}" and gone.destroyed == (kept,)
        (d,) = [e for e in kinds(ledger, "destroy") if e.instance_id == kept and e.ok]
        assert d.actor == "human"

    run(key, body)


def test_one_door_holds_the_after_end_and_held_rules_and_replies_typed(key):
    """`Supervisor.apply` is the one door (the dashboard's engine, the controller, `end`):
    after the end only what acts on what is held passes, an instance not held is refused as
    such, and each answer is a `Reply` with the ids acted on."""
    from rentwatch.engine.executor import Outcome
    from rentwatch.engine.intents import EndIntent, FleetSizeIntent

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        stranger = await sup.apply(StopIntent(iid + 1000))
        assert stranger.not_held and not stranger.done and "not held" in stranger.message
        sup.finished = Outcome(True, "goal")
        for late in (CreateIntent(), FleetSizeIntent(3)):
            reply = await sup.apply(late)
            assert reply.refused and "has ended" in reply.refused and not reply.acted_on
        assert (await sup.apply(StopIntent(iid))).acted_on == (iid,)
        wrong = await sup.apply(EndIntent(destroy=True, typed="not u"))
        assert wrong.refused and "not confirmed" in wrong.refused
        end = await sup.apply(EndIntent(destroy=True, typed="u"))
        assert (
            end.done and end.destroyed == (iid,) and end.lines == (f"destroyed verified i:{iid}",)
        )

    run(key, body)


def test_a_bare_session_adopts_what_is_held_and_writes_off_what_the_market_lost(key):
    """`rentwatch end` with no controller: the engine on a bare session holds what the market
    lists under the campaign's label, and writes off (as a poll would) a rental the ledger
    holds that the market no longer has, so that the end does not list it as billing for ever;
    it writes no campaign_start."""
    from rentwatch.engine.bare import adopt, bare_supervisor
    from rentwatch.ledger.holdings import read_holdings

    market = FakeMarket(list(OFFERS))
    ledger = new_ledger()
    held: list[int] = []

    async def first(sup, market, ledger):
        held.append(await verified(sup, market))
        sup.operator.resize(2)
        await sup.poll_once()
        held.extend(i for i in sup.attempts if i not in held)

    run(key, first, market=market, ledger=ledger)
    kept, gone = held[0], held[1]
    del market.boxes[gone]  # the market let it go without our destroy
    starts = len(kinds(ledger, "campaign_start"))

    async def bare() -> None:
        sup = bare_supervisor(market, ledger, "u", lambda _: None)
        try:
            await adopt(sup, wait_s=0.0)
            assert kept in sup.attempts and gone not in sup.attempts
        finally:
            await sup.close()

    asyncio.run(bare())
    assert [e.instance_id for e in kinds(ledger, "lost")] == [gone]
    assert {h.instance_id for h in read_holdings(ledger, "u")} == {kept}
    assert len(kinds(ledger, "campaign_start")) == starts
