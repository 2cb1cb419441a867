"""Work that comes back after the drained rule stopped the fleet (a job requeued off a host
that died) starts a proven rental we stopped again before anything new is rented (policy
`reuse_stopped`). Found in CI: the example campaign's last job lost its host after the other
two had been stopped as drained; the campaign created two new rentals (a freeze, a fatal pull),
found no fit offer left and ended with the job undone, two proven rentals stopped beside it."""

from __future__ import annotations

from rentwatch.core.decisions import AttemptView, Create, FleetSnapshot, Restart
from rentwatch.core.lifecycle import Phase
from rentwatch.core.policy import DEFAULT, SEED
from rentwatch.core.rules import decide
from rentwatch.engine.attempt import Attempt

from tests.fake_market import FakeMarket, offer
from tests.test_bid_engine import JOB, key, proven  # noqa: F401
from tests.test_supervisor_unit import kinds, run

NOW = 10_000.0


def _stopped(iid: int, dph: float, reusable: bool = True) -> AttemptView:
    return AttemptView(
        instance_id=iid,
        machine_id=10 * iid,
        offer_gpu="RTX 3090",
        phase=Phase.STOPPED,
        status="exited",
        status_msg=None,
        status_since=NOW - 600,
        created_at=0.0,
        passed_preflight=True,
        dph=dph,
        reusable=reusable,
    )


def _snap(*attempts: AttemptView) -> FleetSnapshot:
    return FleetSnapshot(
        fleet=3,
        max_creates=10,
        creates=3,
        budget_usd=10,
        spent_usd=0.5,
        attempts=attempts,
        jobs_pending=1,
        jobs_total=3,
    )


def test_a_requeued_job_starts_the_cheapest_stopped_proven_rental_before_any_create():
    snap = _snap(_stopped(1, 0.40), _stopped(2, 0.25), _stopped(3, 0.10, reusable=False))
    ds = decide(snap, DEFAULT, NOW)
    assert [d.instance_id for d in ds if isinstance(d, Restart)] == [2]  # one job: one host
    assert not [d for d in ds if isinstance(d, Create)]
    # the article's policy rents anew, as before
    assert not [d for d in decide(snap, SEED, NOW) if isinstance(d, Restart)]


def test_only_a_stop_for_want_of_work_makes_a_rental_reusable():
    a = Attempt(5, None, 70, 7, "RTX 4090", 0.0, 0.3, 0.01)
    for k, to in enumerate((Phase.BOOTING, Phase.RUNNING, Phase.VERIFIED, Phase.STOPPED)):
        a.life = a.life.moved(to, 10.0 * (k + 1), "up")
        assert a.life.phase == to
    a.life = a.life.with_proof(True)
    for rule, reusable in (
        ("rule:drained", True),
        ("rule:idle", True),
        ("rule:host_down", False),  # it went offline: not asked back
        ("rule:throttle", False),
        ("human", False),  # a person's stop is a person's
    ):
        a.stopped_by_us, a.stop_rule = True, rule
        assert a.view().reusable is reusable, rule
    a.stop_rule = ""  # the market would not start it: not asked again
    assert not a.view().reusable


def test_the_engine_starts_a_drained_rental_again_when_its_work_comes_back(key):  # noqa: F811
    market = FakeMarket([offer(i, 10 * i, 0.40) for i in range(1, 9)])

    async def body(sup, market, ledger):
        iid = await proven(sup, market)
        a = sup.attempts[iid]
        assert await sup.actions.stop(a, "rule:drained", "no job on it")
        creates = len(kinds(ledger, "create"))
        job = sup.jobs.jobs[0]
        job.status, job.instance_id = "pending", None  # queued again (its host died)
        market.t += 60
        await sup.poll_once()
        started = [e for e in kinds(ledger, "start") if e.instance_id == iid]
        assert started and started[-1].actor == "rule:reuse"
        assert len(kinds(ledger, "create")) == creates  # nothing new rented
        assert a.life.phase == Phase.BOOTING

    run(key, body, market=market, policy=DEFAULT, jobs=(JOB,))
