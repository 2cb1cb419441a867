"""The delivery record (core/offers/track_record.py): what each rental delivered, faded with age, summed
per machine, host, GPU model and price band, and the odds the ranking reads from it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rentwatch.core.offers.track_record import (
    HALF_LIFE_H,
    VERIFIED_ONLY,
    Memory,
    Record,
    Rental,
    band,
    outcome,
    remember,
    weight,
)
from rentwatch.core.offers.work_cost import PRIOR_ODDS

H = 3600.0
NOW = 1_000_000.0


def rental(m: int = 1, **kw: object) -> Rental:
    base: dict[str, object] = {
        "machine_id": m,
        "host_id": m,
        "gpu_name": "RTX 4090",
        "dph": 0.30,
        "at": NOW,
        "verified": True,
        "dud": False,
    }
    base.update(kw)
    return Rental(**base)  # type: ignore[arg-type]


@given(
    lives=st.floats(0, 200, allow_nan=False),
    half_life_h=st.floats(0.5, 1000, allow_nan=False),
)
def test_evidence_weight_halves_per_half_life(lives: float, half_life_h: float) -> None:
    age_h = lives * half_life_h
    w = weight(NOW - age_h * H, NOW, half_life_h)
    older = weight(NOW - (age_h + half_life_h) * H, NOW, half_life_h)
    assert 0 < w <= 1
    assert older == pytest.approx(w / 2, rel=1e-9, abs=1e-300)


@given(half_life_h=st.floats(0.5, 1000, allow_nan=False), n=st.integers(1, 5))
def test_a_record_weighs_half_after_each_half_life(half_life_h: float, n: int) -> None:
    """The same dud seen `n` half-lives ago counts 2**-n of a fresh one in the record."""
    fresh = remember([rental(dud=True, verified=False)], NOW, half_life_h).machines[1]
    old = remember(
        [rental(dud=True, verified=False, at=NOW - n * half_life_h * H)], NOW, half_life_h
    ).machines[1]
    assert old.failed == pytest.approx(fresh.failed * 0.5**n)


def test_fresh_and_future_evidence_weigh_one_and_no_half_life_never_fades() -> None:
    assert weight(NOW, NOW) == 1.0
    assert weight(NOW + 60, NOW) == 1.0  # a clock a little behind the ledger's: not above 1
    assert weight(NOW - 10_000 * H, NOW, 0.0) == 1.0
    assert weight(NOW - HALF_LIFE_H * H, NOW) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"dud": True, "verified": False}, (0.0, 1.0)),  # a dud
        ({"verified": True}, (VERIFIED_ONLY, 0.0)),  # proven, never given work: half
        ({"jobs_finished": 2}, (1.0, 0.0)),  # it delivered
        ({"jobs_finished": 1, "jobs_lost": 1}, (0.5, 0.5)),  # it dropped one job of two
        ({"jobs_lost": 1}, (0.0, 1.0)),  # verified, then lost its only job: no delivery
        ({"verified": False}, (0.0, 0.0)),  # still booting: no evidence yet
        # proven, then quarantined for its host's fault: never half a delivery
        ({"broke_min": 20.0}, (0.0, 1.0)),  # it broke before any job, or idle
        ({"broke_min": 20.0, "jobs_lost": 1}, (0.0, 1.0)),  # the job it held: one loss, not two
        ({"broke_min": 90.0, "jobs_finished": 3}, (0.75, 0.25)),  # it broke after three jobs
    ],
)
def test_a_rental_counts_what_it_delivered_not_that_it_verified(kw, expected) -> None:
    assert outcome(rental(**kw)) == expected


def test_the_record_keeps_the_work_the_losses_outbids_and_throttling() -> None:
    rentals = [
        rental(jobs_finished=2, work_ref_h=1.5, outbids=1, throttled=True),
        rental(jobs_finished=1, jobs_lost=1, work_ref_h=0.5),
        rental(dud=True, verified=False, usd=0.04, lifetime_min=12),
    ]
    rec = remember(rentals, NOW).machines[1]
    assert (rec.jobs_finished, rec.jobs_lost, rec.work_ref_h) == (3, 1, 2.0)
    assert (rec.outbids, rec.throttled, rec.duds) == (1, 1, 1)
    assert (rec.delivered, rec.failed) == (1.5, 1.5)
    assert rec.mean_dud_usd == pytest.approx(0.04) and rec.dud_min == 12


@pytest.mark.parametrize(
    ("kw", "wasted"),
    [
        # a dud: its life and bill
        ({"dud": True, "verified": False, "usd": 0.04, "lifetime_min": 12}, (12, 0.04)),
        # proven, broke before a job finished: its price to the break ($0.30/h for 20 min)
        ({"broke_min": 20.0, "jobs_lost": 1, "usd": 0.50}, (20, 0.10)),
        ({"broke_min": 20.0, "usd": 0.50}, (20, 0.10)),
        ({"broke_min": 90.0, "jobs_finished": 3, "usd": 0.50}, None),  # it delivered first
        ({"jobs_lost": 1, "usd": 0.50}, None),  # lost a job, never quarantined: gone offline
        ({"jobs_finished": 1, "usd": 0.50}, None),
    ],
)
def test_what_a_failure_billed_counts_the_ones_that_broke_after_their_preflight(kw, wasted) -> None:
    """The ranking prices the failures the odds count at what failures billed (`dud_min`,
    `dud_usd`): a machine that passed its preflight and broke before it finished a job billed its
    boot and preflight, so its minutes and bill count beside the duds'."""
    rec = remember([rental(**kw)], NOW).machines[1]
    got = None if rec.duds == 0 else (rec.dud_min, rec.dud_usd)
    assert got == (None if wasted is None else pytest.approx(wasted))
    assert remember([rental(**kw)], NOW).dud_life() == (rec.dud_min, rec.duds)


def test_levels_sum_per_machine_host_model_and_band() -> None:
    rentals = [
        rental(1, host_id=9, jobs_finished=1),
        rental(2, host_id=9, dud=True, verified=False),
        rental(3, host_id=8, gpu_name="RTX 3090", dph=0.20, jobs_finished=1),
    ]
    mem = remember(rentals, NOW)
    assert set(mem.machines) == {1, 2, 3}
    assert (mem.hosts[9].delivered, mem.hosts[9].failed) == (1.0, 1.0)
    assert mem.models["RTX 4090"].runs == 2 and mem.models["RTX 3090"].runs == 1
    assert mem.bands[band("RTX 4090", 0.30)].runs == 2
    assert mem.pool.runs == 3


def test_price_bands_are_per_model_and_a_factor_wide() -> None:
    assert band("RTX 4090", 0.30) == band("RTX 4090", 0.31)
    assert band("RTX 4090", 0.30) != band("RTX 4090", 0.30 * 1.6)
    assert band("RTX 4090", 0.30)[0] != band("RTX 3090", 0.30)[0]
    assert band("RTX 4090", 0.0)[1] < band("RTX 4090", 0.01)[1]  # free: no log error


def test_odds_before_any_rental_are_the_flat_prior() -> None:
    assert Memory().odds("RTX 4090", 0.3, 1, 1, 8.0) == PRIOR_ODDS
    assert Memory().pool_odds(8.0) is None


def test_a_machine_that_delivered_beats_an_unknown_one_and_a_dud_loses() -> None:
    rentals = [rental(1, jobs_finished=2), rental(2, dud=True, verified=False)]
    rentals += [rental(10 + i, jobs_finished=1) for i in range(4)]
    mem = remember(rentals, NOW)
    proven = mem.odds("RTX 4090", 0.30, 1, 1, 8.0)
    unknown = mem.odds("RTX 4090", 0.30, 99, 99, 8.0)
    dud = mem.odds("RTX 4090", 0.30, 2, 2, 8.0)
    assert dud < unknown < proven


def test_a_verified_machine_that_lost_its_jobs_is_worse_than_one_that_finished() -> None:
    mem = remember([rental(1, jobs_finished=2), rental(2, jobs_lost=2)], NOW)
    assert mem.odds("RTX 4090", 0.3, 2, 2, 8.0) < mem.odds("RTX 4090", 0.3, 1, 1, 8.0)


def test_duds_at_a_models_cheap_end_stay_in_their_price_band() -> None:
    """Cheap offers of one model were duds: a dearer offer of that model, in another band,
    keeps better odds than the next cheap one (the band learns, the model barely)."""
    cheap = [rental(i, dph=0.15, dud=True, verified=False) for i in range(4)]
    dear = [rental(10 + i, dph=0.35, jobs_finished=1) for i in range(2)]
    mem = remember(cheap + dear, NOW)
    assert mem.odds("RTX 4090", 0.35, 50, 50, 8.0) > mem.odds("RTX 4090", 0.15, 51, 51, 8.0)


def test_a_hosts_other_machine_carries_its_record() -> None:
    mem = remember([rental(1, host_id=7, dud=True, verified=False)] * 2, NOW)
    assert mem.odds("RTX 4090", 0.3, 2, 7, 8.0) < mem.odds("RTX 4090", 0.3, 3, 8, 8.0)


def test_old_duds_fade_back_towards_the_prior() -> None:
    dud = rental(1, dud=True, verified=False)
    fresh = remember([dud], NOW).odds("RTX 4090", 0.3, 1, 1, 8.0)
    month_old = remember([dud], NOW + 30 * 24 * H).odds("RTX 4090", 0.3, 1, 1, 8.0)
    assert fresh < month_old <= PRIOR_ODDS + 1e-9


def test_minus_never_goes_negative() -> None:
    a = Record(delivered=1.0)
    assert a.minus(Record(delivered=3.0, failed=1.0)) == Record()
    assert a.minus(None) is a


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.integers(0, 3)), max_size=20))
def test_odds_stay_a_probability(rows) -> None:
    rentals = [
        rental(i % 5, host_id=i % 3, dud=d, verified=not d, jobs_finished=f, jobs_lost=lost)
        for i, (d, f, lost) in enumerate(rows)
    ]
    mem = remember(rentals, NOW)
    for m in range(6):
        p = mem.odds("RTX 4090", 0.3, m, m % 3, 8.0)
        assert 0 < p < 1 and math.isfinite(p)


def test_the_ranking_per_delivered_hour_reads_the_record_by_band_and_host() -> None:
    """Unsized work ranks by expected USD per delivered hour (`rank_offers`): with the record,
    a fresh offer in the band where every rental was a dud ranks below a dearer one in a band
    that delivered, and a machine on a host whose other machine failed ranks below a stranger."""
    from rentwatch.core.models import Offer
    from rentwatch.core.offers.choice import choose_offers

    def offer(oid: int, machine: int, host: int, dph: float) -> Offer:
        return Offer(oid, machine, host, "RTX 4090", 1, dph, dph, 0.1, 12.8, 0.98, None, 1.0, "US")

    cheap = [rental(i, dph=0.15, dud=True, verified=False) for i in range(4)]
    dear = [rental(10 + i, dph=0.22, jobs_finished=1) for i in range(4)]
    mem = remember(cheap + dear, NOW)
    history = mem.history()
    cheap_new, dear_new = offer(1, 50, 50, 0.15), offer(2, 51, 51, 0.22)
    got = choose_offers([cheap_new, dear_new], 2, history, "expected_cost", memory=mem, strength=8)
    assert [o for o, _ in got] == [dear_new, cheap_new]
    # without the record by band, the cheap one ranks first (the pool alone cannot tell them)
    blind = choose_offers([cheap_new, dear_new], 2, history, "expected_cost")
    assert blind[0][0] is cheap_new
    # a host's other machine failed twice: its next machine ranks below a stranger's
    host = remember([rental(60, host_id=7, dph=0.22, dud=True, verified=False)] * 2 + dear, NOW)
    same = [offer(3, 61, 7, 0.22), offer(4, 62, 8, 0.22)]
    ranked = choose_offers(same, 2, host.history(), "expected_cost", memory=host, strength=8)
    assert ranked[0][0].host_id == 8


def _scored(rel: float, dud: bool, m: int) -> Rental:
    return rental(
        m, dud=dud, verified=not dud, jobs_finished=0 if dud else 1, listed_reliability=rel
    )


def test_the_listed_score_moves_the_odds_as_far_as_our_rentals_saw_it_predict() -> None:
    """Where our duds were the offers listing a low reliability and our deliveries the high ones
    (held-out 90904: 84% duds below the median score, 19% above), a fresh offer listing a low
    score is priced likelier a dud than one listing a high score; an offer listing none, or a
    market where the score told nothing apart, keeps the odds the records give. The score only
    ever counts against an offer: a high one leaves the odds as they were."""
    told = [_scored(0.88 + 0.01 * i, True, i) for i in range(4)]
    told += [_scored(0.975 + 0.005 * i, False, 10 + i) for i in range(4)]
    mem = remember(told, NOW)
    low = mem.odds("RTX 4090", 0.30, 99, 99, 8.0, 0.90)
    high = mem.odds("RTX 4090", 0.30, 99, 99, 8.0, 0.985)
    plain = mem.odds("RTX 4090", 0.30, 99, 99, 8.0)
    assert low < plain - 0.1 and high == plain
    # the same scores with their outcomes mixed: no signal, no move
    flat = [
        _scored(r.listed_reliability or 0, i % 2 == 0, r.machine_id) for i, r in enumerate(told)
    ]
    flat += [_scored(r.listed_reliability or 0, i % 2 == 1, 50 + i) for i, r in enumerate(told)]
    even = remember(flat, NOW)
    base = even.odds("RTX 4090", 0.30, 99, 99, 8.0)
    for rel in (0.90, 0.985):
        assert even.odds("RTX 4090", 0.30, 99, 99, 8.0, rel) == pytest.approx(base, abs=0.02)


def test_a_machines_own_record_outweighs_its_listed_score() -> None:
    """The score moves the prior an unknown machine starts from; a machine we have seen deliver
    keeps its own record above an unknown one listing a better score."""
    told = [_scored(0.88 + 0.01 * i, True, i) for i in range(4)]
    told += [_scored(0.975 + 0.005 * i, False, 10 + i) for i in range(4)]
    proven = [_scored(0.90, False, 77) for _ in range(3)]
    mem = remember(told + proven, NOW)
    assert mem.odds("RTX 4090", 0.30, 77, 77, 8.0, 0.90) > mem.odds(
        "RTX 4090", 0.30, 98, 98, 8.0, 0.985
    )


def test_a_score_that_delivered_less_when_higher_counts_for_nothing() -> None:
    """A few rentals on a market where the score is noise can fit a slope the wrong way (the
    high-scored ones happened to fail): the fit is then flat, so no offer's odds move, least of
    all a high-scored one's."""
    backwards = [_scored(0.975 + 0.005 * i, True, i) for i in range(3)]
    backwards += [_scored(0.88 + 0.01 * i, False, 10 + i) for i in range(3)]
    mem = remember(backwards, NOW)
    assert mem.listed.slope == 0.0
    plain = mem.odds("RTX 4090", 0.30, 99, 99, 8.0)
    for rel in (0.85, 0.90, 0.95, 0.99):
        assert mem.odds("RTX 4090", 0.30, 99, 99, 8.0, rel) == plain


def test_a_hosts_deliveries_never_lift_a_machine_the_score_counts_against() -> None:
    """Held-out 90904:0: an offer listing a low score on a host whose other machine delivered four
    jobs was ranked as if the host vouched for it. Another machine of a host delivering told
    nothing apart on the held-out markets (docs/benchmarks.md, "Where a warm run's duds come
    from"), so it leaves a stranger's odds where its band and score put them; a host's failures
    still count against its next machine."""
    told = [_scored(0.88 + 0.01 * i, True, i) for i in range(4)]
    told += [_scored(0.975 + 0.005 * i, False, 10 + i) for i in range(4)]
    delivered = [rental(40, host_id=7, jobs_finished=1, listed_reliability=0.98)] * 4
    mem = remember(told + delivered, NOW)
    stranger = mem.odds("RTX 4090", 0.30, 99, 99, 8.0, 0.89)
    same_host = mem.odds("RTX 4090", 0.30, 41, 7, 8.0, 0.89)
    assert same_host == stranger
    failed = remember(told + [rental(40, host_id=7, dud=True, verified=False)] * 2, NOW)
    assert failed.odds("RTX 4090", 0.30, 41, 7, 8.0, 0.89) < failed.odds(
        "RTX 4090", 0.30, 99, 99, 8.0, 0.89
    )
