"""The interruptible tier, renter's side: the client searches the bid tier, creates with a
bid (a bid under min_bid still names its stopped instance), changes a bid, and the core tells
an outbid from other stops and decides which jobs bid, what to bid and what to do on an
outbid."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from rentwatch.core.bidding import tier as B
from rentwatch.core.bidding.rules import BidTerms, as_rented, offer_bid
from rentwatch.core.campaign import Job
from rentwatch.core.decisions import Create, FleetSnapshot
from rentwatch.core.models import Instance, Offer
from rentwatch.core.offers.choice import OfferTerms
from rentwatch.core.policy import DEFAULT
from rentwatch.core.rules import decide
from rentwatch.market.vast.client import VastClient

from tests.fake_market import FakeMarket, campaign, offer

HEALTHY = [{"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "dph": [0.3, 0.4]}]


def test_client_searches_bids_creates_changes_and_sees_the_outbid(make_sim):
    sim = make_sim(
        seed=4, offers=6, time_scale=1, host_class=HEALTHY, pacing=False, bids={"pressure": 0.0}
    )

    async def run() -> None:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            plain = {o.id: o for o in await c.search_offers({})}
            spot = await c.search_offers({}, rental="interruptible")
            o = spot[0]
            assert o.bid_floor is not None and o.bid_floor < o.gpu_dph
            assert o.dph_total < plain[o.id].dph_total  # priced at min_bid
            low = await c.create_instance(o.id, image="img", disk_gb=10, price=o.bid_floor / 2)
            assert low.refused and "min_bid" in low.refused
            inst = await c.show_instance(low.instance_id)
            assert inst is not None and inst.market_stopped and inst.bid_floor > o.bid_floor / 2
            assert B.stop_cause(inst, bid=o.bid_floor / 2, now=c.now()) == "outbid"
            await c.change_bid(low.instance_id, o.bid_floor + 0.05)
            inst = await c.show_instance(low.instance_id)
            assert inst is not None and not inst.market_stopped
            assert inst.gpu_dph == pytest.approx(o.bid_floor + 0.05)
            ok = await c.create_instance(
                spot[1].id, image="img", disk_gb=10, price=spot[1].bid_floor
            )
            assert ok.refused is None

    asyncio.run(run())
    sent = sim.market.instances
    assert all(i.bid is not None for i in sent.values())


def _row(**kw) -> Instance:
    base = dict(
        id=1,
        machine_id=2,
        host_id=3,
        label=None,
        status="stopped",
        target_state="stopped",
        status_msg=None,
        start_date=0.0,
        gpu_name="RTX 4090",
        num_gpus=1,
        gpu_dph=0.2,
        dph_total=0.21,
        storage_total_cost=0.01,
        gpu_util=None,
        ssh_host=None,
        ssh_port=None,
        image="img",
        current_state="stopped",
        next_state="stopped",
    )
    return Instance(**{**base, **kw})


def test_stop_causes_apart():
    now = 1000.0
    assert B.stop_cause(_row(end_date=900.0), bid=0.1, now=now) == "contract"
    assert B.stop_cause(_row(bid_floor=0.2), bid=0.1, now=now) == "outbid"
    assert B.stop_cause(_row(), bid=None, now=now) == "host"
    running = _row(
        status="running",
        target_state="running",
        current_state="running",
        next_state="running",
    )
    assert B.stop_cause(running, bid=0.1, now=now) is None


def test_which_jobs_bid():
    sized = Job(name="a", run="x", ref_gpu="RTX 4090", ref_hours=1.0, checkpoint="ckpt")
    unsized = Job(name="b", run="x", checkpoint="ckpt")
    no_ckpt = dataclasses.replace(sized, checkpoint=None)
    auto = campaign(rental="auto")
    assert B.tier_for(sized, auto, "default") == "interruptible"
    assert B.tier_for(sized, auto, "seed") == "on-demand"
    assert B.tier_for(unsized, auto, "default") == "on-demand"
    assert B.tier_for(no_ckpt, auto, "default") == "on-demand"
    assert B.tier_for(sized, campaign(rental="on-demand"), "default") == "on-demand"


def test_what_to_bid_and_when_it_pays():
    calm = B.bid_for(0.10, 0.30, 0.0, None)
    fought = B.bid_for(0.10, 0.30, 2.0, None)
    assert calm is not None and fought is not None and 0.10 < calm < fought <= 0.27
    assert B.bid_for(0.10, 0.30, 0.0, 0.105) == 0.105  # the campaign's cap
    assert B.bid_for(0.29, 0.30, 0.0, None) is None  # over 90% of on-demand: rent on-demand
    # a market's min_bid so small that the bid rounds under it: a create that would lose at once
    assert B.bid_for(1e-9, 0.30, 0.0, None) is None
    assert B.bid_for(0.0001, 0.30, 0.0, None) == 0.0001
    assert B.worth_bidding(0.12, 0.30, 0.3, 600)
    assert not B.worth_bidding(0.25, 0.30, 3.0, 1800)
    # the ledger's record moves the rate: this machine more than its model
    quiet = B.outbid_rate(B.Exposure(), B.Exposure())
    m, g = B.exposure([(7, "RTX 4090", 4.0, 8), (8, "RTX 4090", 10.0, 1)], 7, "RTX 4090")
    assert B.outbid_rate(m, g) > quiet
    assert B.checkpoint_every_s(600, 0.0) == 600
    assert B.checkpoint_every_s(600, 2.0) == pytest.approx(450)


def test_on_an_outbid_rebid_wait_or_move():
    from rentwatch.core.bidding.rules import tier_rules
    from rentwatch.core.decisions import AttemptView, Move, Rebid, Stop
    from rentwatch.core.lifecycle import Phase

    paused = AttemptView(5, 70, "RTX 4090", Phase.STOPPED, "stopped", None, 0.0, 0.0)
    paused = dataclasses.replace(
        paused, passed_preflight=True, bid=0.10, on_demand_dph=0.30, outbid_at=0.0
    )

    def act(now: float = 0.0, work: bool = True, **kw: Any) -> object:
        return tier_rules(dataclasses.replace(paused, **kw), None, work, now)

    r = act(bid_floor=0.12)
    assert isinstance(r, Rebid) and r.price == pytest.approx(0.132)
    assert act(bid_floor=0.12, rebids=2) is None  # rebids spent: it waits
    assert act(bid_floor=0.30) is None  # held on-demand: it waits
    moved = act(900, bid_floor=0.30)
    assert isinstance(moved, Move) and "operator" in moved.reason
    assert isinstance(act(900, work=False, bid_floor=0.30), Stop)  # no job: held stopped
    # all it holds is an exited job's output: a pause bills storage only, a move reruns the job
    assert act(900, bid_floor=0.30, busy=True) is None
    # ... also when no work waits, and past an hour: stopping it would queue the job again, and
    # a chain of rivals outlasts half an hour (a CI run saw a job run twice to the end so)
    for s in (900, 3600, 2 * 3600):
        assert act(s, work=False, bid_floor=0.30, busy=True) is None
    assert isinstance(act(B.OUTPUT_WAIT_S + 1, bid_floor=0.30, busy=True), Move)
    assert B.work_lost_s(1000.0, 100.0, 700.0) == 300.0
    assert B.work_lost_s(1000.0, 100.0, None) == 900.0


def test_fake_market_speaks_the_tier():
    fm = FakeMarket([offer(1, 11, dph=0.3, bid_floor=0.12)])

    async def run() -> None:
        spot = await fm.search_offers({}, rental="interruptible")
        assert spot[0].dph_total == 0.12
        low = await fm.create_instance(1, image="i", disk_gb=10, price=0.05)
        assert low.refused
        await fm.change_bid(low.instance_id, 0.2)
        fm.outbid(low.instance_id, 0.25)
        row = (await fm.list_instances())[0]
        assert B.stop_cause(row, bid=0.2, now=fm.now()) == "outbid"

    asyncio.run(run())


def test_receipt_splits_spend_by_tier_and_counts_work_lost_to_outbids(tmp_path):
    from rentwatch.ledger.receipt import format_receipt
    from rentwatch.ledger.store import Ledger

    led = Ledger(tmp_path / "l.duckdb")
    for iid, bid in ((1, None), (2, 0.12)):
        s = led.intent(
            "create",
            at=0,
            actor="rule:replace",
            reason="fleet short",
            campaign="c",
            machine_id=10 + iid,
            offer_id=iid + 50,
            gpu_dph=bid or 0.3,
            storage_dph=0.01,
            gpu_name="RTX 4090",
        )
        tier = {"bid": bid, "on_demand_dph": 0.3} if bid else {}
        led.outcome(s, at=0, ok=True, instance_id=iid, detail={"gpu_billing": "created"} | tier)
    led.record(
        "outbid",
        at=1800,
        actor="market",
        reason="bid floor over our bid",
        instance_id=2,
        campaign="c",
        detail={"bid": 0.12, "bid_floor": 0.2, "work_lost_s": 240},
    )
    led.record(  # outbid while it booted: no job there, no work lost
        "outbid",
        at=600,
        actor="market",
        reason="bid floor over our bid",
        instance_id=2,
        campaign="c",
        detail={"bid": 0.12, "bid_floor": 0.2, "work_lost_s": None, "job": None},
    )
    for iid in (1, 2):
        s = led.intent(
            "destroy", at=3600, actor="human", reason="done", instance_id=iid, campaign="c"
        )
        led.outcome(s, at=3600, ok=True, instance_id=iid)
    [r] = led.receipt("c")
    assert r["usd_on_demand"] == pytest.approx(0.31, abs=0.005)
    assert r["usd_interruptible"] == pytest.approx(0.13, abs=0.005)
    assert (r["interruptions"], r["work_lost_interrupt_min"]) == (2, 4.0)
    assert r["interruptions_of_jobs"] == 1
    lines = dict(format_receipt(r))
    assert lines["interruptions (outbid)"] == "2 (1 of a running job)"
    assert lines["work lost to interruptions"] == "4.0 min (4.0 each)"  # of the one with a job
    # the same work all on-demand: the bid's hour less the 4 min an outbid threw away, at the
    # machine's $0.30/h, in place of the bid's $0.12
    assert r["usd_all_on_demand"] == pytest.approx(0.44 - 0.12 + 0.3 * (56 / 60), abs=0.001)
    assert lines["USD the same work all on-demand"] == "$0.600"


def test_a_paused_rental_holding_an_exited_jobs_output_is_waited_for_longer():
    from rentwatch.core.bidding.rules import tier_rules
    from rentwatch.core.decisions import Move, Resume, Stop
    from rentwatch.core.lifecycle import Phase
    from rentwatch.engine.attempt import Attempt

    a = Attempt(5, None, 70, 7, "RTX 4090", 0.0, 0.3, 0.01)
    for k, to in enumerate((Phase.BOOTING, Phase.RUNNING, Phase.VERIFIED, Phase.STOPPED)):
        a.life = a.life.moved(to, 10.0 * (k + 1), "up")
        assert a.life.phase == to
    a.life = a.life.with_proof(True)
    a.bid, a.bid_floor, a.outbid_at = 0.10, 0.30, 100.0  # outbid at 100, min_bid over any cap
    a.rebids = 2
    later = 100.0 + B.WAIT_S + 60
    # a running job's rental: its job moves on from its checkpoint after WAIT_S
    assert isinstance(tier_rules(a.view(busy=False), None, True, later), Move)
    # an exited job's output on its disk (work waiting on it, as `rules` passes it): waited
    # for longer (a pause bills storage only), then moved on like any other
    assert tier_rules(a.view(busy=True), None, True, later) is None
    # ... with no work waiting either: not stopped (`hold`), which would queue the job again
    assert tier_rules(a.view(busy=True), None, False, 100 + 2 * 3600) is None
    assert isinstance(tier_rules(a.view(busy=False), None, False, later), Stop)
    assert isinstance(tier_rules(a.view(busy=True), None, True, 100 + B.OUTPUT_WAIT_S + 1), Move)
    # resumed by itself: stopped before it bills, unless a job runs or is wanted on it
    a.outbid_at, a.resumed = None, True
    assert isinstance(tier_rules(a.view(busy=False), None, False, later), Stop)
    assert isinstance(tier_rules(a.view(busy=True), None, False, later), Resume)
    assert isinstance(tier_rules(a.view(busy=False), None, True, later), Resume)


def _bid_offer(oid: int, machine: int, gpu: str, min_bid: float, on_demand: float) -> Offer:
    """An offer as a bid search lists it: `dph_total` is its min_bid plus storage."""
    return Offer(oid, machine, 1, gpu, 1, min_bid + 0.01, on_demand, 0.1, 12.8, 0.98, None,
                 24576.0, "US", bid_floor=min_bid)  # fmt: skip


def test_offers_are_ranked_and_capped_at_the_price_their_create_pays():
    """Held-out 777:6: an A6000 listed at its min_bid ($0.29/h) ranked first, `auto` found a
    bid there not worth it (the model outbid 1.3 times an hour) and rented it on-demand at
    $0.70/h, 3.1x the floor's price per unit. Each offer is now priced as its create will be:
    its bid, or its on-demand price where no bid is placed; and the campaign's ceiling reads
    that price."""
    a6000 = _bid_offer(1, 46959, "RTX A6000", 0.29, 0.704)
    r3070 = _bid_offer(2, 36336, "RTX 3070", 0.054, 0.12)
    calm = BidTerms("interruptible", "auto")
    fought = BidTerms("interruptible", "auto", exposure=((46959, "RTX A6000", 2.0, 6),))
    bid, _ = offer_bid(a6000, calm)
    assert bid is not None and [o.dph_total for o in as_rented([a6000], calm) or ()] == [
        pytest.approx(bid + 0.01)
    ]
    assert offer_bid(a6000, fought)[0] is None  # on-demand: the bid costs more with its outbids
    priced_a, priced_b = as_rented([a6000, r3070], fought) or ()
    assert priced_a.dph_total == pytest.approx(0.714) and priced_b.dph_total < 0.1
    assert (priced_a.id, priced_a.bid_floor, priced_a.gpu_dph) == (1, 0.29, 0.704)
    assert as_rented([a6000], BidTerms("on-demand", "auto")) == (a6000,)  # nothing to change
    # through decide(): under a $0.50/h ceiling the A6000 is not rented on-demand at $0.70/h
    snap = FleetSnapshot(
        fleet=1, max_creates=40, creates=0, budget_usd=20, spent_usd=0, attempts=(),
        offers=(a6000,), terms=OfferTerms(max_dph=0.5, image_cuda=12.4), bidding=fought,
    )  # fmt: skip
    assert not [d for d in decide(snap, DEFAULT, 1000.0) if isinstance(d, Create)]
    [made] = [d for d in decide(dataclasses.replace(snap, bidding=calm), DEFAULT, 1000.0)
              if isinstance(d, Create)]  # fmt: skip
    assert made.bid == pytest.approx(bid) and made.offer is not None and made.offer.id == 1


def test_a_raised_bid_comes_down_to_a_fresh_bid_and_never_under_where_it_rose_from():
    fresh = B.bid_for(0.10, 0.40, 0.3, None)
    assert fresh is not None
    assert B.lower_bid(0.30, 0.11, 0.10, 0.40, 0.3, None) == fresh  # the rival left: back down
    assert B.lower_bid(0.30, 0.20, 0.10, 0.40, 0.3, None) == 0.20  # not under its old bid
    assert B.lower_bid(0.21, 0.20, 0.10, 0.40, 0.3, None) is None  # a small fall: kept
    assert B.lower_bid(fresh * 1.05, 0.1, 0.10, 0.40, 0.3, None) is None
    assert B.lower_bid(0.30, 0.11, 0.29, 0.40, 0.3, None) is None  # the rival is still there
    assert B.lower_bid(0.30, 0.11, None, 0.40, 0.3, None) is None  # no min_bid read: kept
    assert B.lower_bid(0.30, 0.1, 0.10, 0.40, 0.3, 0.105) == 0.105  # under the campaign's cap


def test_an_outbid_costs_a_restart_at_the_bid_and_a_share_of_moves_at_on_demand():
    # a rebid resumes the same machine: most outbids cost a restart, not a fresh host
    assert B.outbid_cost(0.2, 0.5) == pytest.approx(
        B.RESUME_H * 0.2 + B.MOVE_SHARE * B.MOVE_BOOT_H * 0.5
    )
    assert B.outbid_cost(0.2, 0.5) < (B.MOVE_BOOT_H + B.RESUME_H) * 0.5
    # at a bid half of on-demand and 1.2 outbids an hour, the tier still pays (family 31's
    # market 1 rented A5000s on-demand at $2.30 per ref-h when every outbid cost a move)
    assert B.worth_bidding(0.25, 0.50, 1.2, 900)


def test_output_held_on_a_paused_rental_asks_for_no_other_host():
    """Family 31's market 9: a job exited on a bid rental that an outbid then paused, so its
    output waited there for the resume while nothing was queued. The job counted as work, no
    host in service held it, so a proven rental stopped for want of work was started, stopped
    again a minute later for want of a job, and the next started: 100 minutes of it, $1.66 of
    on-demand GPU for nothing."""
    from rentwatch.core.decisions import AttemptView, Finish, Restart
    from rentwatch.core.lifecycle import Phase
    from rentwatch.core.policy import DEFAULT
    from rentwatch.core.rules import decide

    def stopped(iid: int, **kw: Any) -> AttemptView:
        return AttemptView(iid, iid, "RTX 3080", Phase.STOPPED, "stopped", None, 0.0, 0.0,
                           passed_preflight=True, **kw)  # fmt: skip

    held = stopped(1, busy=True, bid=0.18, bid_floor=0.25, on_demand_dph=0.3, outbid_at=1000.0)
    spare = stopped(2, reusable=True, dph=0.57)
    snap = FleetSnapshot(
        fleet=3, max_creates=40, creates=5, budget_usd=40, spent_usd=3, attempts=(held, spare),
        jobs_pending=0, jobs_running=1, jobs_total=6, bidding=BidTerms("interruptible", "auto"),
    )  # fmt: skip
    assert snap.jobs_held == 1
    out = decide(snap, DEFAULT, 1200.0)
    assert not [d for d in out if isinstance(d, Restart | Create | Finish)]  # not over either
    # work queued again: the stopped rental is the first to take it
    out = decide(dataclasses.replace(snap, jobs_pending=1), DEFAULT, 1200.0)
    assert [d.instance_id for d in out if isinstance(d, Restart)] == [2]


def test_no_offer_left_does_not_end_a_campaign_whose_proven_rental_is_only_paused():
    """Held-out 5150:1: the last proven host was outbid with one job left, no fit offer was
    left on the market, and the campaign ended in that poll, job queued, while a rebid under
    the cap would have resumed it."""
    from rentwatch.core.decisions import AttemptView, Finish, Rebid
    from rentwatch.core.lifecycle import Phase
    from rentwatch.core.policy import DEFAULT
    from rentwatch.core.rules import decide

    paused = AttemptView(9, 9, "RTX 3060", Phase.STOPPED, "stopped", None, 0.0, 0.0,
                         passed_preflight=True, bid=0.11, bid_floor=0.16, on_demand_dph=0.3,
                         outbid_at=1000.0, rebids=1)  # fmt: skip
    snap = FleetSnapshot(
        fleet=1, max_creates=40, creates=23, budget_usd=40, spent_usd=2, attempts=(paused,),
        jobs_pending=1, jobs_total=6, offers=(), terms=OfferTerms(max_dph=0.5, image_cuda=12.4),
        bidding=BidTerms("interruptible", "auto"),
    )  # fmt: skip
    assert snap.proven_paused == 1
    out = decide(snap, DEFAULT, 1060.0)
    assert not [d for d in out if isinstance(d, Finish)]
    (rb,) = [d for d in out if isinstance(d, Rebid)]
    assert rb.price > 0.16
    # let go (our explicit stop clears the pause): then nothing carries the work, and it ends
    gone = dataclasses.replace(paused, outbid_at=None)
    out = decide(dataclasses.replace(snap, attempts=(gone,)), DEFAULT, 1060.0)
    assert [d.rule for d in out if isinstance(d, Finish)] == ["rule:no_offers"]


def test_the_share_of_outbids_that_move_is_the_ledgers_over_a_prior():
    assert B.move_share(0, 0) == B.MOVE_SHARE
    assert B.move_share(40, 38) > 0.85  # rivals on-demand: no rebid wins, nearly all move
    assert B.move_share(40, 4) < 0.2  # rivals that bid: rebid and resumed
    assert B.move_share(3, 9) == B.move_share(3, 3) and B.move_share(-1, -1) == B.MOVE_SHARE
    # a bid at 0.6x on-demand and 1.2 outbids an hour pays while two in five outbids move, and
    # not once every outbid does (held-out 9001:8: 48 creates, every job still queued)
    assert B.worth_bidding(0.60, 1.0, 1.2, 600, 0.4)
    assert not B.worth_bidding(0.60, 1.0, 1.2, 600, 1.0)


def test_a_rebid_rental_is_held_for_the_fleet_and_no_replacement_is_rented_for_it():
    """80801:0 (warm): each outbid of the one proven host queued its job again, and the same
    poll rented a replacement (and spares) while a rebid resumed the host within a minute and
    took the job back: the replacements booted for nothing. A rebid rental is held for the
    fleet until its wait runs out; one with no rebid left waits and moves, so its replacement
    is rented at once as before."""
    from rentwatch.core.decisions import AttemptView, Move, Rebid, Resume
    from rentwatch.core.lifecycle import Phase

    paused = AttemptView(9, 9, "RTX 4080", Phase.STOPPED, "stopped", None, 0.0, 0.0,
                         passed_preflight=True, bid=0.145, bid_floor=0.173, on_demand_dph=0.3,
                         outbid_at=1000.0)  # fmt: skip
    spare = _bid_offer(1, 4080, "RTX 4080", 0.12, 0.35)
    snap = FleetSnapshot(
        fleet=1, max_creates=40, creates=3, budget_usd=40, spent_usd=1, attempts=(paused,),
        jobs_pending=1, jobs_total=6, offers=(spare,),
        terms=OfferTerms(max_dph=0.5, image_cuda=12.4), bidding=BidTerms("interruptible", "auto"),
    )  # fmt: skip
    out = decide(snap, DEFAULT, 1000.0)
    assert [type(d) for d in out] == [Rebid]
    # rebid since, its bid over the price to beat: waiting on the resume, still held
    raised = dataclasses.replace(paused, bid=0.19, rebids=1, raised_from=0.145)
    assert not decide(dataclasses.replace(snap, attempts=(raised,)), DEFAULT, 1100.0)
    # resumed since (90902:0's warm-up rented two in the poll that saw it resume): back
    # into service, no replacement either
    back = dataclasses.replace(raised, outbid_at=None, resumed=True)
    out = decide(dataclasses.replace(snap, attempts=(back,)), DEFAULT, 1100.0)
    assert [type(d) for d in out] == [Resume]
    # no rebid left: it waits and then moves, so the replacement is rented now, as before
    spent = dataclasses.replace(paused, rebids=2)
    out = decide(dataclasses.replace(snap, attempts=(spent,)), DEFAULT, 1000.0)
    assert [type(d) for d in out] == [Create]
    # held no longer than an outbid rental is waited for: then let go, and replaced
    late = 1000.0 + B.WAIT_S
    out = decide(dataclasses.replace(snap, attempts=(raised,)), DEFAULT, late)
    assert [type(d) for d in out] == [Move, Create]
