"""Hedged provisioning: spares in flight follow the offers' odds and the operator's value of
time (pure core: `core/hedge.py`, wired through `decide`)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rentwatch.core.decisions import AttemptView, Create, FleetSnapshot
from rentwatch.core.hedge import HedgeInputs, expected_shortfall, spare_attempts
from rentwatch.core.lifecycle import Phase
from rentwatch.core.offers.choice import OfferTerms
from rentwatch.core.offers.reputation import market_odds, rank_offers
from rentwatch.core.policy import DEFAULT, SEED
from rentwatch.core.rules import decide

from tests.fuzzing import examples

from .fake_market import offer

NOW = 100_000.0
OFFERS = tuple(offer(i, 100 + i, 0.20 + i * 0.01) for i in range(20))


def hedge(**kw) -> int:
    base = dict(
        need=1,
        p_deliver=0.5,
        value_of_time_usd_per_h=2.0,
        dud_usd=0.03,
        surplus_usd=0.1,
        fleet=1,
        max_spares=3,
    )
    base.update(kw)
    return spare_attempts(HedgeInputs(**base))[0]


def test_no_value_of_time_or_no_need_means_no_spares():
    assert hedge(value_of_time_usd_per_h=0.0) == 0
    assert hedge(need=0) == 0
    assert hedge(max_spares=0) == 0


def test_a_market_where_most_creates_fail_is_not_walked_one_create_at_a_time():
    assert hedge(p_deliver=0.4) >= 1
    # on an honest market the same operator rents what it needs and no more
    assert hedge(p_deliver=0.97) == 0


def test_an_operator_who_values_time_more_keeps_more_in_flight():
    assert hedge(value_of_time_usd_per_h=0.5) < hedge(value_of_time_usd_per_h=20.0)


def test_a_spare_that_would_take_the_next_job_costs_less_than_one_that_would_idle():
    kw = dict(p_deliver=0.8, value_of_time_usd_per_h=1.0, fleet=3, need=3)
    assert hedge(surplus_usd=0.02, **kw) > hedge(surplus_usd=0.5, **kw)


def test_expected_shortfall():
    assert expected_shortfall(1, 1, 0.5) == 0.5
    assert expected_shortfall(2, 1, 0.5) == 0.25
    assert abs(expected_shortfall(3, 2, 0.5) - 0.625) < 1e-12  # 2*(1/8) + 1*(3/8)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.integers(0, 5),
    st.floats(0.0, 1.0),
    st.floats(0.0, 50.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 2.0),
    st.integers(1, 5),
    st.integers(0, 4),
)
def test_spares_stay_within_the_cap_and_grow_with_the_value_of_time(
    need, p, v, dud, surplus, fleet, cap
):
    kw = dict(need=need, p_deliver=p, dud_usd=dud, surplus_usd=surplus, fleet=fleet, max_spares=cap)
    low = hedge(value_of_time_usd_per_h=v, **kw)
    high = hedge(value_of_time_usd_per_h=v * 2 + 1, **kw)
    assert 0 <= low <= cap and low <= high <= cap
    if need == 0:
        assert high == 0


def snapshot(history, n=3, jobs_pending=0) -> FleetSnapshot:
    return FleetSnapshot(
        fleet=n,
        max_creates=40,
        creates=0,
        budget_usd=20,
        spent_usd=0,
        attempts=(),
        offers=OFFERS,
        terms=OfferTerms(max_dph=1.0, image_cuda=12.4),
        history=history,
        jobs_pending=jobs_pending,
        jobs_total=jobs_pending,
    )


# our ledger's record on a market: 4 in 10 rentals delivered (machines not on offer now)
BAD_MARKET = {900 + i: ((1, 0, 0.0) if i < 4 else (0, 1, 0.04)) for i in range(10)}
GOOD_MARKET = {900 + i: (1, 0, 0.0) for i in range(30)}


def creates(snap, policy) -> list[Create]:
    return [d for d in decide(snap, policy, NOW) if isinstance(d, Create)]


def test_decide_hedges_on_a_bad_market_and_says_why():
    impatient = DEFAULT.with_overrides({"value_of_time_usd_per_h": 2.0})
    made = creates(snapshot(BAD_MARKET, jobs_pending=6), impatient)
    assert len(made) > 3
    assert "spare" in made[-1].reason and "p(deliver)=0.4" in made[-1].reason
    # one create per machine, never a machine twice
    assert len({c.offer.machine_id for c in made if c.offer}) == len(made)


def test_the_default_hedges_a_small_fleet_on_a_bad_market_only():
    """At default's own value of time: a fleet of one on a 40% market gets a spare; the same
    fleet on a market where everything delivered does not."""
    assert len(creates(snapshot(BAD_MARKET, n=1, jobs_pending=2), DEFAULT)) == 2
    assert len(creates(snapshot(GOOD_MARKET, n=1, jobs_pending=2), DEFAULT)) == 1


def test_decide_does_not_hedge_on_an_honest_market_without_work_for_a_spare():
    assert len(creates(snapshot(GOOD_MARKET), DEFAULT)) == 3


def test_the_articles_policy_never_hedges():
    assert len(creates(snapshot(BAD_MARKET, jobs_pending=6), SEED)) == 3


def test_spares_are_counted_among_the_attempts_in_flight():
    """Attempts already booting cover the spares: a second poll does not add more."""
    snap = snapshot(BAD_MARKET, jobs_pending=6)
    first = creates(snap, DEFAULT)
    booting = tuple(
        AttemptView(
            instance_id=i,
            machine_id=c.offer.machine_id if c.offer else None,
            offer_gpu="RTX 3090",
            phase=Phase.BOOTING,
            status="loading",
            status_msg="Downloading",
            status_since=NOW - 10,
            created_at=NOW - 20,
        )
        for i, c in enumerate(first)
    )
    again = FleetSnapshot(**{**snap.__dict__, "attempts": booting, "creates": len(first)})
    assert creates(again, DEFAULT) == []


def test_market_odds_pool_our_own_record():
    assert market_odds({}) is None
    assert abs(market_odds(BAD_MARKET) - (0.8 + 4) / 12) < 1e-9


def test_a_machine_that_delivered_before_ranks_up_when_waiting_has_a_price():
    """The wait term reads our own record: a proven machine saves a round of waiting."""
    proven, unknown = offer(1, 1, 0.80), offer(2, 2, 0.30)
    history = {1: (1, 0, 0.0), **BAD_MARKET}
    by_cost = [o.id for o, _ in rank_offers([unknown, proven], history, "expected_cost")]
    by_time = [
        o.id
        for o, _ in rank_offers(
            [unknown, proven], history, "expected_cost", value_of_time_usd_per_h=20.0
        )
    ]
    assert by_cost == [2, 1]  # without a price on waiting, the cheaper unknown machine first
    assert by_time == [1, 2]
