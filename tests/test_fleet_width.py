"""How many hosts sized work is worth (core/fleet_width): one more host only while the time it
takes off the work's end is worth its bill at the operator's value of time."""

from __future__ import annotations

import dataclasses

import pytest
from rentwatch.core.decisions import Hold
from rentwatch.core.delivery import WorkOutlook
from rentwatch.core.fleet_width import Host, narrowed, play_out, worth_another
from rentwatch.core.lifecycle import Phase
from rentwatch.core.offer_choice import OfferTerms
from rentwatch.core.policy import DEFAULT, SEED
from rentwatch.core.rules import Create, FleetSnapshot, decide

from .fake_market import offer
from .test_rules import att

WORTH = DEFAULT.with_overrides({"fleet_by_worth": True})  # off in default: an operator's choice
JOBS = (0.8, 0.6, 0.5, 0.5, 0.4, 0.3)  # bench/bid_campaign.toml's six jobs


def test_play_out_gives_the_biggest_job_to_the_host_free_first():
    fast, slow = Host(1.5, 0.3), Host(0.3, 0.06)
    end, usd = play_out([fast], [0.6, 0.3])
    assert end == pytest.approx(0.6) and usd == pytest.approx(0.18)
    # free together, the fast host takes the biggest job; the slow one the next, and holds the
    # end back: 1 h for the 0.3 job against 0.6 h on the fast host alone
    end_both, usd_both = play_out([fast, slow], [0.6, 0.3])
    assert end_both == pytest.approx(1.0) and usd_both == pytest.approx(0.12 + 0.06)
    # a slow host free first takes the biggest job
    end_first, _ = play_out([Host(1.5, 0.3, 0.1), slow], [0.6])
    assert end_first == pytest.approx(2.0)
    assert play_out([], [0.5])[0] == float("inf")
    assert play_out([Host(1.0, 0.1, 0.5)], []) == (0.5, 0.0)


def test_a_slow_host_that_would_end_the_work_later_is_not_worth_renting():
    held = [Host(1.5, 0.3), Host(1.4, 0.3)]
    slow = Host(0.3, 0.06, free_in_h=0.25)
    worth, why = worth_another(held, slow, 0.06 * 0.25, JOBS, value_of_time=0.7)
    assert not worth and "sooner than 2" in why


def test_a_fast_host_that_saves_an_hour_is_worth_its_boot():
    held = [Host(0.5, 0.2)]
    fast = Host(0.5, 0.2, free_in_h=0.3)
    worth, _ = worth_another(held, fast, 0.2 * 0.3, JOBS, value_of_time=0.7)
    assert worth
    # the same host is not worth it to an operator who prices waiting at nothing
    assert not worth_another(held, fast, 0.2 * 0.3, JOBS, value_of_time=0.0)[0]


def test_the_first_host_is_always_worth_renting_and_none_without_work():
    assert worth_another([], Host(0.1, 5.0, 9.0), 45.0, JOBS, 0.7)[0]
    assert not worth_another([Host(1.0, 0.1)], Host(1.0, 0.1), 0.0, (), 0.7)[0]


def _snapshot(attempts, pending=JOBS, running=None, **kw):
    work = WorkOutlook(
        ref_tflops=165.0,
        job_ref_h=0.8,
        boot_h=0.25,
        queue_ref_h=tuple(pending) if pending is not None else None,
        running=running or {},
    )
    offers = (offer(1, 10, 0.30, gpu="RTX 4090"), offer(2, 20, 0.12, gpu="RTX 3060"))
    return FleetSnapshot(
        fleet=3,
        max_creates=40,
        creates=len(attempts),
        budget_usd=100.0,
        spent_usd=0.0,
        attempts=tuple(attempts),
        jobs_pending=len(pending or ()),
        jobs_total=6,
        jobs_running=sum(1 for a in attempts if a.busy),
        offers=offers,
        terms=OfferTerms(max_dph=1.0, image_cuda=12.0),
        work=work,
        **kw,
    )


def _proven_4090(instance_id: int, machine_id: int):
    return att(
        instance_id=instance_id, machine_id=machine_id, phase=Phase.VERIFIED,
        passed_preflight=True, offer_gpu="RTX 4090", dph=0.3,
    )  # fmt: skip


def test_the_rules_rent_no_slow_host_beside_two_fast_ones():
    fast = [_proven_4090(100 + i, 1 + i) for i in range(2)]
    only_slow = dataclasses.replace(_snapshot(fast), offers=(offer(2, 20, 0.12, gpu="RTX 3060"),))
    target, why = narrowed(only_slow, only_slow.offers, WORTH, 3, (), 1000.0)
    assert target == 2 and "sooner" in why
    out = decide(only_slow, WORTH, 1000.0)
    assert not [d for d in out if isinstance(d, Create)]
    # and the rules say so: the log's `hold` line (engine/executor says it once per change)
    (hold,) = [d for d in out if isinstance(d, Hold)]
    assert (hold.hosts, hold.fleet, hold.rule) == (2, 3, "rule:fleet_width")
    assert "sooner" in hold.reason
    # `default` as shipped and the seed (the article's script) fill the fleet whatever the host
    assert [d for d in decide(only_slow, DEFAULT, 1000.0) if isinstance(d, Create)]
    assert [d for d in decide(only_slow, SEED, 1000.0) if isinstance(d, Create)]
    # with unsized work queued the queue cannot be played out: the fleet is filled
    unsized = dataclasses.replace(
        only_slow, work=dataclasses.replace(only_slow.work, queue_ref_h=None)
    )
    assert narrowed(unsized, unsized.offers, WORTH, 3, (), 1000.0)[0] == 3


def test_the_rules_still_rent_the_first_host_and_a_second_fast_one():
    snap = _snapshot([])
    creates = [d for d in decide(snap, WORTH, 1000.0) if isinstance(d, Create)]
    assert creates and creates[0].offer.gpu_name == "RTX 4090"
    one = _proven_4090(100, 99)
    assert narrowed(_snapshot([one]), _snapshot([one]).offers, WORTH, 3, (), 1000.0)[0] >= 2


def test_a_proven_rental_stopped_for_want_of_work_is_started_again_all_the_same():
    """The play-out prices fresh creates (a boot, the duds on the way): a proven rental we
    stopped boots in a minute with its data, so the rules start it again as before."""
    from rentwatch.core.decisions import Restart

    fast = [_proven_4090(100 + i, 1 + i) for i in range(2)]
    stopped = att(
        instance_id=300, machine_id=30, phase=Phase.STOPPED, passed_preflight=True,
        offer_gpu="RTX 3060", dph=0.12, reusable=True,
    )  # fmt: skip
    snap = dataclasses.replace(
        _snapshot([*fast, stopped]), offers=(offer(2, 20, 0.12, gpu="RTX 3060"),)
    )
    out = decide(snap, WORTH, 1000.0)
    assert [d.instance_id for d in out if isinstance(d, Restart)] == [300]
    assert not [d for d in out if isinstance(d, Create)]
