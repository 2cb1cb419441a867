"""The `default` ranking by expected USD per delivered reference GPU-hour (core/offers/work_cost.py):
a dud bills the offer's own price for as long as the rules take to catch it, the odds come from
this machine's and this GPU model's record in our ledger, and `seed` still ranks by price."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from rentwatch.core.campaign import Job
from rentwatch.core.delivery import PRIOR_SHARE, WorkOutlook, outlook
from rentwatch.core.models import Offer
from rentwatch.core.offers.choice import choose_offers, rank_by_work
from rentwatch.core.offers.reputation import market_odds
from rentwatch.core.offers.track_record import Rental, remember
from rentwatch.core.offers.work_cost import (
    deliver_odds,
    detect_h,
    detect_prior_h,
    host_cost,
)
from rentwatch.core.policy import DEFAULT, SEED
from rentwatch.core.preflight.gpu_specs import expected_tflops
from rentwatch.engine.offers import OfferBook

from .ledgers import new_ledger

REF = "RTX 4090"


def _offer(oid: int, gpu: str, dph: float, machine: int) -> Offer:
    return Offer(oid, machine, 1, gpu, 1, dph, dph, 0.1, 12.8, 0.98, None, 24576.0, "US")


def _work(job_ref_h: float = 1.0, **kw: object) -> WorkOutlook:
    return WorkOutlook(expected_tflops(REF) or 1.0, job_ref_h, **kw)  # type: ignore[arg-type]


def _usd_per_unit(o: Offer, p: float, work: WorkOutlook) -> float:
    """What renting `o` until one delivers is expected to bill per reference GPU-hour, by hand:
    its working and boot hours at its price, and (1-p)/p duds at its price for dud_h each."""
    rate = (expected_tflops(o.gpu_name) or 0) * PRIOR_SHARE / work.ref_tflops
    hours = work.job_ref_h / rate + work.boot_h + (1 - p) / p * work.dud_h
    return o.dph_total * hours / work.job_ref_h


def _poor_market(first: int = 500, n: int = 8) -> dict[int, tuple[int, int, float]]:
    """Other machines on this market: most of them duds."""
    out = {first + i: (0, 1, 0.02) for i in range(n)}
    out[first + n] = (1, 0, 0.0)
    return out


def test_a_dear_fast_card_with_a_poor_record_ranks_below_a_cheap_delivering_one():
    fast = _offer(1, "H100 SXM", 1.00, 101)  # 4x a 4090's speed, nearly 3x its price
    cheap = _offer(2, REF, 0.35, 102)
    history = _poor_market()
    history[101] = (0, 2, 0.05)  # two duds there, cheap ones (caught fast)
    history[102] = (3, 0, 0.0)  # delivered three times
    work = _work()
    pool = market_odds(history)
    p_fast = deliver_odds(history[101], None, pool)
    p_cheap = deliver_odds(history[102], None, pool)
    assert _usd_per_unit(fast, p_fast, work) > _usd_per_unit(cheap, p_cheap, work)
    (first, why), (second, _) = rank_by_work([fast, cheap], history, work, 0.7)
    assert (first, second) == (cheap, fast) and "per ref-h" in why
    # seed is the article's: cheapest first on price, whatever the work
    [(seed_first, seed_why)] = choose_offers([fast, cheap], 1, history, SEED.rank, 0.7, work)
    assert seed_first is cheap and "cheapest" in seed_why
    [(seed_first, _)] = choose_offers(
        [fast, _offer(3, REF, 0.45, 103)], 1, history, SEED.rank, 0.7, work
    )
    assert seed_first.id == 3


def test_a_dud_costs_the_offers_own_price_not_a_flat_figure():
    """Both machines unknown on a market where most creates fail: a flat $0.07 a dud made the
    dear H100 look as good per unit as the 4090; at its own price its duds make it dearer."""
    fast = _offer(1, "H100 SXM", 1.00, 101)
    cheap = _offer(2, REF, 0.35, 102)
    history = _poor_market()
    work = _work()
    pool = market_odds(history)
    p = deliver_odds(None, None, pool)
    assert p < 0.3
    assert _usd_per_unit(fast, p, work) > _usd_per_unit(cheap, p, work)
    assert [o for o, _ in rank_by_work([fast, cheap], history, work, 0.7)] == [cheap, fast]
    # the dud term scales with the price: twice the price, twice the expected bill
    one = host_cost(0.5, 1.0, 0.25, 0.2, 1.0, 0.25)
    two = host_cost(1.0, 1.0, 0.25, 0.2, 1.0, 0.25)
    assert two.usd == pytest.approx(2 * one.usd)
    assert one.usd == pytest.approx(0.5 * (1.0 + 0.25 + 3 * 0.2))
    # on a market that delivers, the fast card's speed per dollar wins
    good = {500 + i: (1, 0, 0.0) for i in range(12)}
    assert [o for o, _ in rank_by_work([fast, cheap], good, _work(3.0), 0.7)][0] is fast


def test_a_longer_time_to_catch_a_dud_counts_against_dear_cards():
    fast = _offer(1, "H100 SXM", 1.00, 101)
    cheap = _offer(2, REF, 0.35, 102)
    history = _poor_market()
    quick = [o for o, _ in rank_by_work([fast, cheap], history, _work(3.0, dud_h=0.02), 0.0)]
    slow = [o for o, _ in rank_by_work([fast, cheap], history, _work(3.0, dud_h=1.25), 0.0)]
    assert quick[0] is fast and slow[0] is cheap
    # the prior is a share of the policy's boot and preflight deadlines (13 of 75 minutes)
    assert detect_prior_h(45 * 60, 30 * 60) == pytest.approx(13 / 60)
    assert detect_prior_h(DEFAULT.boot_deadline_s * 2, DEFAULT.preflight_deadline_s * 2) == (
        pytest.approx(26 / 60)
    )
    # the ledger's own mean dud life takes over as duds are seen
    prior = 13 / 60
    assert detect_h(prior, 0.0, 0) == pytest.approx(prior)
    assert detect_h(prior, 100 * 5.0, 100) == pytest.approx(5 / 60, rel=0.05)


def test_the_odds_read_this_models_record_on_the_market():
    a = _offer(1, REF, 0.35, 101)
    b = _offer(2, "RTX 3090", 0.30, 102)  # a little dearer per unit than the 4090
    history = {500: (2, 2, 0.05)}
    work = _work()
    assert [o for o, _ in rank_by_work([a, b], history, work, 0.7)][0] is a
    bad_model = _work(models={REF: (0, 6), "RTX 3090": (3, 0)})
    assert [o for o, _ in rank_by_work([a, b], history, bad_model, 0.7)][0] is b
    pool = market_odds(history)
    assert pool is not None
    assert deliver_odds(None, (0, 6), pool) < pool < deliver_odds(None, (3, 0), pool)
    # this machine's own record over its model's: a good machine of a poor model
    assert deliver_odds((4, 0, 0.0), (0, 6), pool) > deliver_odds(None, (0, 6), pool)


def test_the_ledgers_rentals_carry_each_models_deliveries_duds_and_dud_minutes():
    led = new_ledger()

    def rental(iid: int, gpu: str, verified: bool, life_s: float, blame: bool = False) -> None:
        s = led.intent(
            "create", at=0, actor="rule:t", reason="r", campaign="c", gpu_name=gpu, machine_id=iid
        )
        led.outcome(s, at=0, ok=True, instance_id=iid)
        if verified:
            led.record("preflight_passed", at=300, actor="engine", reason="ok", instance_id=iid)
            return
        detail = {"class": "freeze", **({"blame": "suspect"} if blame else {})}
        led.record("abandon", at=life_s, actor="rule:t", reason="x", instance_id=iid, detail=detail)
        s = led.intent("destroy", at=life_s, actor="rule:t", reason="x", instance_id=iid)
        led.outcome(s, at=life_s, ok=True)

    rental(1, REF, True, 0)
    rental(2, REF, False, 600)
    rental(3, REF, False, 1200)
    rental(4, "H100 SXM", False, 900)
    rental(5, "H100 SXM", False, 60, blame=True)  # the campaign's fault: not the host's
    # the campaign's fault (5) counts for nobody
    rows = sorted((r.gpu_name, r.verified, r.dud, r.lifetime_min) for r in led.rentals())
    assert rows == [
        ("H100 SXM", False, True, 15.0),
        (REF, False, True, 10.0),
        (REF, False, True, 20.0),
        (REF, True, False, 5.0),
    ]
    led.close()


def test_the_outlook_carries_the_model_record_and_dud_time():
    jobs = [Job(f"j{i}", "true", ref_gpu=REF, ref_hours=1.0) for i in range(3)]
    work = outlook(jobs, {}, 3, {REF: (1, 2)}, 0.5)
    assert work is not None and work.models[REF] == (1, 2) and work.dud_h == 0.5


def test_duds_at_a_models_cheap_end_do_not_send_the_work_to_a_card_twice_as_dear():
    """Training family 2026:6: the nine cheapest 4090s were duds. After four of them (and two
    3070s) the pooled record and the 4090's own record, each counting two runs against a flat
    prior, compounded to p(deliver) 0.03, and `default` worked on 3060s at 2.5x the healthy
    4090s' price per unit. The policy's `odds_prior_runs` sets how far a few failures move
    each level; at the default policy's strength the next 4090 still ranks first."""
    history = {100 + i: (0, 1, 0.08) for i in range(4)} | {200: (0, 1, 0.05), 201: (0, 1, 0.05)}
    models = {REF: (0, 4), "RTX 3070": (0, 2)}
    offers = [_offer(1, REF, 0.379, 1), _offer(2, "RTX 3060", 0.15, 2)]
    offers.append(_offer(3, "RTX 3070", 0.135, 3))

    def first(strength: float) -> str:
        work = _work(1.55, models=models, prior_runs=strength)
        return rank_by_work(offers, history, work, 0.7)[0][0].gpu_name

    assert first(2.0) == "RTX 3060"  # the compounding, as it was
    assert first(DEFAULT.odds_prior_runs) == REF
    # the engine's outlook carries the policy's strength (`--policies default+odds_prior_runs=5`)
    market = SimpleNamespace(now=lambda: 0.0)  # the book fades the record to the market's now
    book = OfferBook(market, new_ledger(), None, None, None, DEFAULT)  # type: ignore[arg-type]
    jobs = [Job("a", "true", ref_gpu=REF, ref_hours=1.0)]
    assert book.work_outlook(jobs, 2).prior_runs == DEFAULT.odds_prior_runs  # type: ignore[union-attr]
    book.policy = DEFAULT.with_overrides({"odds_prior_runs": 5})
    assert book.work_outlook(jobs, 2).prior_runs == 5  # type: ignore[union-attr]


def test_a_spare_that_would_work_on_a_dearer_offer_is_not_free():
    """A delivering spare with a job waiting takes that job; on an offer ranked below the
    fleet's, its share of the work costs the difference (`spare_work_premium`), and the hedge
    keeps fewer spares for it than when the work were paid alike wherever it ran."""
    from rentwatch.core.offers.choice import hedge_for, spare_work_premium

    cheap = [_offer(i, REF, 0.20, i) for i in range(1, 4)]
    dear = [_offer(10 + i, REF, 0.60, 10 + i) for i in range(3)]
    poor = _poor_market()  # most creates fail: the hedge wants spares
    work = _work(1.0)
    assert spare_work_premium(cheap + dear, 3, poor, work) > 0.5
    assert spare_work_premium(cheap * 2, 3, poor, work) == 0.0  # alike: nothing extra
    assert spare_work_premium(cheap + dear, 3, poor, None) == 0.0  # unsized work: none known
    impatient = DEFAULT.with_overrides({"value_of_time_usd_per_h": 2.0})
    args = (cheap[:1] + dear, 1, poor, impatient, 1, True)
    with_premium, _ = hedge_for(*args, work=work)
    without, _ = hedge_for(*args)
    assert without > 0 and with_premium < without
    alike, _ = hedge_for(
        cheap[:1] + [_offer(20 + i, REF, 0.20, 20 + i) for i in range(3)],
        1,
        poor,
        impatient,
        1,
        True,
        work=work,
    )
    assert alike == without  # spares as cheap as the host they hedge for: no premium


def test_a_fresh_ledger_explores_on_the_cheap_card_before_the_dear_one():
    """A fast, dear card that does the work at half the cheap card's price per reference
    GPU-hour, when it works: with nothing learned, a dud there bills its own price while the
    rules catch it (and its boot bills as much), so the cheap card is tried first; once the
    dear card's model has delivered, it is trusted with the work."""
    from rentwatch.core.offers.track_record import Rental, remember

    cheap = _offer(1, "RTX 3090", 0.20, 101)
    rate = (expected_tflops("RTX 3090") or 0) / (expected_tflops("H100 SXM") or 1)
    dear = _offer(2, "H100 SXM", 0.10 / rate, 102)  # half as dear per unit of work, if it works
    work = _work(1.0, memory=remember([], 0.0))
    assert rank_by_work([dear, cheap], {}, work)[0][0] is cheap
    proven = [
        Rental(200 + i, 200 + i, "H100 SXM", dear.dph_total, 0.0, True, False, jobs_finished=1)
        for i in range(6)
    ]
    learned = _work(1.0, memory=remember(proven, 0.0))
    assert rank_by_work([cheap, dear], {}, learned)[0][0] is dear


def test_where_our_duds_listed_low_scores_a_low_scored_offer_ranks_below_a_dearer_high_one():
    """The ranking hands each offer's listed reliability to the record: after a campaign whose
    duds were the low-scored offers, a fresh offer listing 0.90 ranks below one 5% dearer
    listing 0.985; on a fresh ledger the cheaper one ranks first (the score alone moves
    nothing)."""

    def past(m: int, rel: float, dud: bool) -> Rental:
        return Rental(
            m, m, REF, 0.30, 0.0, not dud, dud, 0.02, 5.0, 0 if dud else 1, 0, 0.0, 0, False, rel
        )

    told = [past(i, 0.88 + 0.01 * i, True) for i in range(4)]
    told += [past(10 + i, 0.975 + 0.005 * i, False) for i in range(4)]
    low = replace(_offer(1, REF, 0.300, 201), reliability=0.90)
    high = replace(_offer(2, REF, 0.315, 202), reliability=0.985)
    fresh = _work(memory=remember([], 0.0), prior_runs=8.0)
    assert [o.id for o, _ in rank_by_work([high, low], {}, fresh)] == [1, 2]
    warm = _work(memory=remember(told, 0.0), prior_runs=8.0)
    assert [o.id for o, _ in rank_by_work([low, high], {}, warm)] == [2, 1]
