"""The rule that answers a host's price increase (core/worth/price_increase.py): accept while the rental
is still the better buy per delivered reference GPU-hour, move's cost in; reject otherwise."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rentwatch.core.worth.price_increase import (
    ACCEPT_RULE,
    REJECT_RULE,
    IncreaseCase,
    PriceIncrease,
    decide_increase,
)
from rentwatch.core.worth.swap import keep_usd_per_ref_h

INC = PriceIncrease(1, 1001, 0.4, 0.6, None, None, 1_000.0, 9_000.0)


def case(**kw) -> IncreaseCase:
    base = dict(
        increase=INC,
        old_dph=0.42,
        new_dph=0.62,
        rate=1.0,
        work_ref_h=4.0,
        fresh=(0.5, "RTX 4090 at $0.35/h"),
        redo_ref_h=0.0,
        value_of_time=0.0,
    )
    return IncreaseCase(**{**base, **kw})


@pytest.mark.parametrize(
    "kw, accept, words",
    [
        ({}, False, "dearer than a move"),  # $0.62 per ref-h against a fresh $0.50
        ({"fresh": (0.7, "x")}, True, "still the better buy"),
        ({"rate": 1.5}, True, "still the better buy"),  # a fast host: $0.41 per ref-h
        ({"redo_ref_h": 2.0}, True, "still the better buy"),  # a move redoes half the work
        ({"new_dph": 0.40}, True, "no dearer than now"),
        ({"fresh": None}, True, "no fit offer"),
        ({"work_ref_h": 0.0}, True, "no sized work ahead"),
        ({"rate": None}, True, "nothing to weigh it against"),
    ],
)
def test_cases(kw, accept, words):
    v = decide_increase(case(**kw))
    assert v.accept is accept and words in v.reason
    assert v.rule == (ACCEPT_RULE if accept else REJECT_RULE)
    assert v.increase is INC


def test_the_reason_names_both_prices_and_both_costs():
    v = decide_increase(case())
    assert "$0.4200/h -> $0.6200/h" in v.reason and "RTX 4090 at $0.35/h" in v.reason
    assert v.keep == pytest.approx(0.62) and v.move == pytest.approx(0.5)


@given(
    old=st.floats(0.01, 5),
    new=st.floats(0.01, 5),
    rate=st.floats(0.05, 4),
    work=st.floats(0.1, 50),
    fresh=st.floats(0.01, 10),
    redo=st.floats(0, 5),
)
def test_it_rejects_only_a_dearer_rental_than_a_move(old, new, rate, work, fresh, redo):
    v = decide_increase(
        case(
            old_dph=old, new_dph=new, rate=rate, work_ref_h=work, fresh=(fresh, ""), redo_ref_h=redo
        )
    )
    keep = keep_usd_per_ref_h(new, rate, work, 0.0)
    move = fresh * (work + redo) / work
    if new <= old or keep <= move:
        assert v.accept
    else:
        assert not v.accept and v.rule == REJECT_RULE
