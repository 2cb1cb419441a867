"""[K] What rentwatch did not create is not rentwatch's, and the operator's intent wins: the
supervisor against the in-memory fake market (each test well under a second)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rentwatch.core.campaign import Campaign
from rentwatch.core.decisions import Create, Stop
from rentwatch.core.lifecycle import Phase
from rentwatch.core.policy import SEED
from rentwatch.core.preflight.verdict import Verdict
from rentwatch.engine.executor import Outcome
from rentwatch.engine.hosts.ssh import RunResult, SSHRunner, load_or_create_key
from rentwatch.engine.intents import (
    CreateIntent,
    DestroyConfirmation,
    DestroyIntent,
    FleetSizeIntent,
    HandOverIntent,
    StartIntent,
    StopIntent,
)
from rentwatch.engine.supervisor import Supervisor
from rentwatch.ledger import EventKind, Ledger
from rentwatch.views.snapshot import snapshot

from .fake_market import FakeMarket, offer
from .fake_market import campaign as fake_campaign
from .ledgers import new_ledger

OFFERS = [offer(1, 10, 0.30), offer(2, 20, 0.20), offer(3, 30, 0.25)]
FOREIGN = [offer(91, 910, 0.40), offer(92, 920, 0.35), offer(93, 930, 0.30), offer(94, 940, 0.5)]


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_or_create_key(tmp_path_factory.mktemp("k") / "key")


class RecordingRunner(SSHRunner):
    """Every SSH command rentwatch would send, by instance; none answers."""

    tried: list[int] = []

    async def run(
        self, instance_id: int, host: str, port: int, command: str, **kw: Any
    ) -> RunResult:
        RecordingRunner.tried.append(instance_id)
        raise ConnectionRefusedError(f"instance {instance_id}: Permission denied (publickey)")


def campaign(**more: Any) -> Campaign:
    return fake_campaign("k", **more)


def go(key: Any, body: Any, market: FakeMarket, adopt_all: bool = False, **camp: Any) -> Ledger:
    ledger = new_ledger()

    async def main() -> None:
        sup = Supervisor(
            market,
            ledger,
            campaign(**camp),
            SEED,
            RecordingRunner(key),
            log=lambda _: None,
            adopt_all=adopt_all,
            observe_only=camp.get("fleet") == 0,
        )
        await sup.prepare()
        try:
            await body(sup, market, ledger)
        finally:
            await sup.close()

    asyncio.run(main())
    return ledger


def hand_made(market: FakeMarket) -> list[int]:
    """Instances made outside rentwatch: by hand (no label), by another tool (a foreign
    label), one that does not take rentwatch's SSH key, one with a fatal-looking status."""
    return [
        market.adopt(None, FOREIGN[0], actual="loading", msg="Error response from daemon: fatal"),
        market.adopt("my-notebook", FOREIGN[1], actual="running", msg="", gpu_util=0.0),
        market.adopt("skypilot-x", FOREIGN[2], actual="running", msg="", ssh_port=9),
        market.adopt(None, FOREIGN[3], actual="loading", msg="Pulling fs layer"),  # frozen
    ]


def changes_to(market: FakeMarket, ids: list[int]) -> list[Any]:
    acts = ("stop_instance", "start_instance", "destroy_instance")
    return [c for c in market.calls if c[0] in acts and c[1] in ids]


@pytest.mark.parametrize("with_campaign", [False, True])
@pytest.mark.parametrize("quit_mode", ["stop", "detach", "trap"])
def test_instances_rentwatch_did_not_create_survive_watch_and_any_quit(
    key, with_campaign, quit_mode
):
    market = FakeMarket(list(OFFERS) + FOREIGN)
    theirs = hand_made(market)
    RecordingRunner.tried = []

    async def body(sup, market, ledger):
        for _ in range(12):  # past the freeze window, the SSH deadline, the boot deadline
            market.t += 5 * 60
            await sup.poll_once()
        snap = snapshot(sup, market.t)
        shown = {s.instance_id: s for s in snap.instances}
        for iid in theirs:  # shown and priced, not supervised
            assert iid in shown and not shown[iid].supervised
        assert shown[theirs[1]].billed_usd > 0
        assert snap.observed == 4 and snap.observe_only == (not with_campaign)
        if not with_campaign:  # watching has no goal: a person's keys are never refused
            assert sup.finished is None
        if quit_mode == "detach":
            await sup.detach_all("operator chose detach on quit")
        else:
            await sup.release_all("trap" if quit_mode == "trap" else "human", "dashboard closed")
        assert not [e for e in ledger.events() if e.kind == "detached" and e.instance_id in theirs]

    ledger = go(key, body, market, adopt_all=True, fleet=1 if with_campaign else 0)
    assert changes_to(market, theirs) == []
    assert not set(RecordingRunner.tried) & set(theirs)  # no preflight, no watchdog
    for iid in theirs:
        assert market.boxes[iid].intended == "running"
    mine = [b.id for b in market.boxes.values() if b.id not in theirs]
    assert bool(mine) == with_campaign  # the campaign still supervised its own
    kinds = {e.kind for e in ledger.events() if e.instance_id in theirs}
    assert not kinds & {"stop", "destroy", "abandon", "quarantine", "start"}
    assert "adopted" in kinds  # logged: observed, with why


def test_a_handed_over_instance_is_supervised_and_the_hand_over_is_a_human_act(key):
    market = FakeMarket(list(OFFERS) + FOREIGN)
    fatal = market.adopt(None, FOREIGN[0], actual="loading", msg="Error response: fatal")

    async def body(sup, market, ledger):
        market.t += 10
        await sup.poll_once()
        assert market.boxes[fatal].intended == "running"  # observed only
        await sup.apply(HandOverIntent(fatal))
        again = await sup.apply(HandOverIntent(fatal))  # once is enough
        assert again.refused and "already supervised" in again.refused and not again.done
        market.t += 10
        await sup.poll_once()
        (ev,) = [e for e in ledger.events() if e.kind == EventKind.HAND_OVER]
        assert ev.actor == "human" and ev.instance_id == fatal and "now applies" in ev.reason
        assert any("a person touched" in line for line in sup.journal.lines)

    go(key, body, market, adopt_all=True, fleet=0)
    assert market.boxes[fatal].intended == "destroyed"  # the fatal rule, once handed over


def test_a_handed_over_instance_deadlines_count_from_the_hand_over(key):
    """Its status line unchanged for ten minutes while only observed: the freeze rule (six
    minutes) counts from the hand-over, not from the last change, so the next poll does not
    destroy what rentwatch did not create; once the window passes after it, the rule applies."""
    market = FakeMarket(list(OFFERS) + FOREIGN)
    pulling = market.adopt(None, FOREIGN[3], actual="loading", msg="Pulling fs layer")

    async def body(sup, market, ledger):
        market.t += 10
        await sup.poll_once()
        market.t += 10 * 60
        await sup.poll_once()
        await sup.apply(HandOverIntent(pulling))
        market.t += 10
        await sup.poll_once()
        assert market.boxes[pulling].intended == "running"
        assert sup.attempts[pulling].life.phase == Phase.BOOTING
        market.t += 6 * 60
        await sup.poll_once()
        assert market.boxes[pulling].intended == "destroyed"  # frozen since the hand-over

    go(key, body, market, adopt_all=True, fleet=0)


async def verified(sup: Supervisor, market: FakeMarket) -> int:
    await sup.poll_once()
    iid = next(a.instance_id for a in sup.attempts.values() if a.owned)
    market.set(iid, actual="running", msg="")
    market.t += 10
    await sup.poll_once()
    a = sup.attempts[iid]
    a.preflight_task.cancel()
    a.verdict = Verdict(True, None, "ok", 70.0, 71.0)
    market.t += 10
    await sup.poll_once()
    assert a.life.phase == Phase.VERIFIED and a.passed_preflight
    a.tend_task.cancel()
    return iid


def test_a_human_start_resets_the_boot_deadline(key):
    """Stop a verified instance, start it again 50 minutes after its create: the boot
    deadline counts from the start, so the next polls do not stop it again."""

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        sup.attempts[iid].util_low_since = market.t  # idle when it was stopped
        await sup.apply(StopIntent(iid))
        market.t += 50 * 60
        await sup.poll_once()
        assert sup.finished is None  # a fleet of 2 lowered to 1 with none verified: not done
        await sup.apply(StartIntent(iid))
        # the 50 stopped minutes are no idle time: the idle rule stopped it again at once
        assert sup.attempts[iid].util_low_since is None
        stops = []
        for _ in range(3):
            market.t += 60
            stops += [d for d in await sup.poll_once() if isinstance(d, Stop)]
        assert stops == []
        assert sup.attempts[iid].life.phase == Phase.BOOTING
        market.set(iid, actual="running", msg="")
        market.t += 10
        await sup.poll_once()
        market.t += 10
        await sup.poll_once()
        assert sup.attempts[iid].life.phase == Phase.VERIFIED  # back in service
        assert sup.campaign.fleet == 2  # the stop lowered it, the start raised it back
        market.t += 60
        assert not [d for d in await sup.poll_once() if isinstance(d, Stop)]

    # a fleet of 1 lowered to 0 by the stop reached its goal, and an ended campaign starts nothing
    go(key, body, FakeMarket(list(OFFERS)), fleet=2)


def test_after_the_end_a_start_is_refused_as_a_create_is_and_a_stop_still_acts(key):
    """A start after the end set a rental billing with nothing left to supervise it: the one
    door refuses it as it refuses a create, the wanted fleet and a hand-over."""

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        await sup.apply(StopIntent(iid))
        sup.finish(Outcome(True, "the campaign was ended by a person"))
        before = len(market.calls)
        for intent in (StartIntent(iid), CreateIntent(), FleetSizeIntent(3), HandOverIntent(iid)):
            reply = await sup.apply(intent)
            assert not reply.done and "the campaign has ended" in (reply.refused or ""), intent
        assert market.calls[before:] == [] and market.boxes[iid].intended == "stopped"
        done = await sup.apply(DestroyIntent(DestroyConfirmation(iid, str(iid))))
        assert done.destroyed == (iid,)

    go(key, body, FakeMarket(list(OFFERS)))


def test_a_human_stop_of_a_verified_instance_lowers_the_fleet_instead_of_replacing(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        held = len(sup.attempts)
        await sup.apply(StopIntent(iid))
        creates = []
        for _ in range(3):
            market.t += 30
            creates += [d for d in await sup.poll_once() if isinstance(d, Create)]
        assert creates == [] and len(sup.attempts) == held
        snap = snapshot(sup, market.t)
        assert snap.fleet == 1 and snap.in_service == 0  # shown: wanted fleet lowered
        (ev,) = [e for e in ledger.events() if e.kind == EventKind.FLEET_SIZE]
        assert ev.actor == "human" and ev.detail == {"old": 2, "new": 1}

    go(key, body, FakeMarket(list(OFFERS)), fleet=2)


@pytest.mark.parametrize("stopper", ["rule:idle", "human"])
def test_a_start_raises_the_fleet_only_to_undo_a_stop_that_lowered_it(key, stopper):
    # a rental the drained or idle rule stopped was never counted out of the fleet: starting it
    # by hand raised the wanted fleet past the campaign's, and the rules rented one more
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        if stopper == "human":
            await sup.apply(StopIntent(iid))  # lowers the fleet: the start undoes that
            assert snapshot(sup, market.t).fleet == 0
        else:
            assert await sup.actions.stop(sup.attempts[iid], stopper, "GPU idle")
        market.t += 10
        await sup.apply(StartIntent(iid))
        assert snapshot(sup, market.t).fleet == 1
        sizes = [e.detail for e in ledger.events() if e.kind == EventKind.FLEET_SIZE]
        assert sizes == ([{"old": 1, "new": 0}, {"old": 0, "new": 1}] if stopper == "human" else [])

    go(key, body, FakeMarket(list(OFFERS)), fleet=1)


def test_a_fleet_size_intent_changes_the_fleet_recorded_and_named_by_automation(key):
    async def body(sup, market, ledger):
        await verified(sup, market)
        await sup.apply(FleetSizeIntent(2))
        market.t += 10
        ds = await sup.poll_once()
        assert len([d for d in ds if isinstance(d, Create)]) == 1
        (ev,) = [e for e in ledger.events() if e.kind == EventKind.FLEET_SIZE]
        assert ev.actor == "human" and ev.detail == {"old": 1, "new": 2}
        assert any("a person set" in line for line in sup.journal.lines)
        assert snapshot(sup, market.t).fleet == 2

    go(key, body, FakeMarket(list(OFFERS)))


def test_an_operator_destroy_is_in_the_decision_log(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        await sup.apply(DestroyIntent(DestroyConfirmation(iid, str(iid))))
        assert any(
            line.startswith(f"destroy i:{iid}") and "by human" in line for line in sup.journal.lines
        )

    go(key, body, FakeMarket(list(OFFERS)))


def test_the_snapshot_figures_are_the_receipts_at_the_same_moment(key):
    """A live fleet: one dud (a frozen pull, abandoned), one verified instance that worked,
    was stopped by a person and started again, one still booting. Spent, GPU-hours, duds,
    dud USD and verified on screen equal `ledger.receipt()` within a tenth of a cent."""

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        await sup.apply(FleetSizeIntent(2))
        market.t += 10
        await sup.poll_once()
        market.t += 7 * 60
        await sup.poll_once()  # the second froze: abandoned, replaced
        market.t += 30 * 60
        await sup.poll_once()
        await sup.apply(StopIntent(iid))
        market.t += 5 * 60
        await sup.poll_once()
        await sup.apply(StartIntent(iid))
        market.t += 60
        await sup.poll_once()
        sup.journal.fact(EventKind.NOTE, None, at=market.t, actor="engine", reason="now")
        snap = snapshot(sup, market.t)
        r = ledger.receipt("k")[0]
        assert r["duds"] >= 1 and r["verified"] == 1
        assert snap.duds == r["duds"] and snap.verified == r["verified"]
        assert snap.spent_usd == pytest.approx(r["total_usd"], abs=1e-3)
        assert snap.dud_usd == pytest.approx(r["dud_usd"], abs=1e-3)
        assert snap.gpu_hours == pytest.approx(r["gpu_hours"], abs=1e-4)
        assert snap.in_service == 0  # booting again: verified once, not in service now

    go(key, body, FakeMarket(list(OFFERS)))


def test_the_campaigns_rate_now_leaves_out_what_it_did_not_create(key):
    """The "$/h now" beside the campaign's budget bar (and `rentwatch ls`'s $/h) is the
    campaign's: an observed instance bills apart, shown once as "not rentwatch's"."""
    market = FakeMarket(list(OFFERS) + FOREIGN)
    theirs = market.adopt("my-notebook", FOREIGN[1], actual="running", msg="", gpu_util=0.0)

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        market.t += 60
        await sup.poll_once()
        mine, other = sup.attempts[iid], sup.attempts[theirs]
        assert mine.owned and not other.owned
        snap = snapshot(sup, market.t)
        assert snap.dph_now == pytest.approx(mine.gpu_dph + mine.storage_dph)
        assert snap.observed == 1
        assert snap.observed_dph == pytest.approx(other.gpu_dph + other.storage_dph)

    go(key, body, market, adopt_all=True, fleet=1)


def test_a_cancel_of_close_reaches_its_caller(key):
    # close waits for the preflights it cancelled; a cancel of close itself (a second Ctrl-C,
    # a shutdown) must not be swallowed with them
    async def body(sup: Supervisor, market: FakeMarket, ledger: Ledger) -> None:
        await sup.poll_once()
        a = next(iter(sup.fleet.attempts.values()))

        async def stubborn() -> None:  # a preflight slow to wind down
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                await asyncio.sleep(60)

        a.preflight_task = asyncio.create_task(stubborn())
        await asyncio.sleep(0)
        closing = asyncio.create_task(sup.close())
        await asyncio.sleep(0.05)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(closing, 5)
        a.preflight_task.cancel()

    go(key, body, FakeMarket(list(OFFERS)), fleet=1)


def test_a_quit_while_hosts_boot_costs_them_no_reputation(key):
    # the operator quits while the fleet boots: those hosts were cancelled, not found dead,
    # and the next campaign must not rank them below machines never seen
    async def body(sup: Supervisor, market: FakeMarket, ledger: Ledger) -> None:
        await sup.poll_once()
        assert sup.attempts
        await sup.release_all("human", "operator quit")

    ledger = go(key, body, FakeMarket(list(OFFERS)), fleet=2)
    assert ledger.events(where="kind = 'abandon'"), "nothing was cancelled"
    assert not any(r.dud for r in ledger.rentals())
    hosts = ledger.query("select sum(duds) d, sum(dud_usd) u from hosts")
    assert hosts.rows[0] == (0, 0), "the receipt's host table disagrees with the ranking"
