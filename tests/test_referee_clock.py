"""The referee's time: a market clock that bends without jumps and stands while the engine
cannot run or is looking at it; each run's lag (a host's event to the engine's notice), and a
run over the bound rerun slower or marked invalid, never scored silently."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from rentwatch.core.lifecycle import Phase
from rentwatch.referee.lag import (
    HostEvent,
    Notices,
    host_events,
    judge,
    lag_figures,
    lags,
    noticed_at,
    summarise_valid,
)
from rentwatch.referee.pacing import MAX_SLOWDOWN, SSH_BOUND_S, Governor, rerun_if_late
from rentwatch.sim.market import SimClock


class Wall:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _clock(scale: float = 600.0) -> tuple[SimClock, Wall]:
    wall = Wall()
    return SimClock(scale, origin=1_000_000.0, monotonic=wall), wall


# -- the clock --------------------------------------------------------------------------------


def test_a_scale_change_bends_market_time_and_never_jumps():
    clock, wall = _clock(600)
    wall.t += 1.0
    assert clock.now() == pytest.approx(1_000_600.0)
    clock.set_scale(60)
    assert clock.now() == pytest.approx(1_000_600.0)  # no jump at the change
    wall.t += 1.0
    assert clock.now() == pytest.approx(1_000_660.0)
    assert clock.time_scale == 60 and clock.nominal_scale == 600
    with pytest.raises(ValueError):
        clock.set_scale(0)


def test_without_beats_the_market_stands_after_the_cap():
    clock, wall = _clock(600)
    clock.hold_after(0.025)
    wall.t += 5.0  # the engine's loop did not run for five wall seconds
    assert clock.now() == pytest.approx(1_000_000.0 + 0.025 * 600)
    clock.beat()
    wall.t += 0.01
    clock.beat()
    assert clock.now() == pytest.approx(1_000_000.0 + 0.035 * 600)
    clock.hold_after(math.inf)
    wall.t += 1.0
    assert clock.now() == pytest.approx(1_000_000.0 + 1.035 * 600)


def test_beats_do_not_count_while_the_clock_is_held_unless_the_holder_waits_on_it():
    clock, wall = _clock(600)
    clock.hold_after(0.025)
    with clock.held():
        for _ in range(100):  # a poll of a wall second, beaten all along
            wall.t += 0.01
            clock.beat()
        assert clock.now() == pytest.approx(1_000_000.0 + 0.025 * 600)
        with clock.waited_on():  # a call paced in market seconds waits on the clock
            before = clock.now()
            for _ in range(10):
                wall.t += 0.01
                clock.beat()
            assert clock.now() - before == pytest.approx(0.1 * 600, abs=16)
        waited = clock.now()
        for _ in range(10):
            wall.t += 0.01
            clock.beat()
        assert clock.now() - waited <= 0.025 * 600  # held again once the wait is over
    held = clock.now()
    for _ in range(10):
        wall.t += 0.01
        clock.beat()  # released: the market runs again
    assert clock.now() - held == pytest.approx(0.1 * 600, abs=16)


def test_the_clock_never_runs_backwards_through_changes():
    clock, wall = _clock(600)
    clock.hold_after(0.05)
    seen = [clock.now()]
    for i in range(200):
        wall.t += (i % 7) * 0.013
        if i % 3 == 1:
            clock.set_scale(100 + i)
        else:
            clock.beat()
        seen.append(clock.now())
    assert seen == sorted(seen)


def test_a_poll_that_blocks_the_loop_costs_the_market_the_cap_not_its_wall_time():
    from rentwatch.referee.pacing import BEAT_CAP_S, _beat

    clock = SimClock(600.0)

    async def main() -> float:
        clock.hold_after(BEAT_CAP_S)
        beat = asyncio.create_task(_beat(clock))
        await asyncio.sleep(0.05)
        before = clock.now()
        time.sleep(0.3)  # a poll's own CPU: the loop cannot beat meanwhile
        spent = clock.now() - before
        beat.cancel()
        return spent

    spent = asyncio.run(main())
    assert spent <= BEAT_CAP_S * 600 + 1e-6  # not 0.3 x 600 = 180 market seconds


# -- lag ---------------------------------------------------------------------------------------

START = 1000.0


def _row(iid: int, **kw: object) -> dict[str, object]:
    row: dict[str, object] = {
        "id": iid,
        "created_at": START + 1,
        "running_at": None,
        "destroyed_at": None,
        "actual_status": "loading",
        "outbid_at": [],
        "market_stopped_at": None,
    }
    row.update(kw)
    return row


def test_a_boot_is_noticed_at_the_engines_first_move_past_booting():
    truth = {"instances": [_row(1, running_at=START + 300, actual_status="running")]}
    notices = Notices(
        {1: ((START + 5, Phase.BOOTING), (START + 330, Phase.RUNNING))},
        {},
    )
    [event] = host_events(truth, START, START + 1000)
    assert event == HostEvent("boot", 1, START + 300)
    assert noticed_at(event, notices) == START + 330
    assert lags(truth, notices, START, START + 1000) == [30.0]


def test_an_event_not_yet_noticed_counts_with_its_age_while_the_engine_could_see_it():
    truth = {"instances": [_row(1, running_at=START + 300, actual_status="running")]}
    unseen = Notices({1: ((START + 5, Phase.BOOTING),)}, {})
    assert lags(truth, unseen, START, START + 700) == [400.0]
    # gone before the engine could look: nothing to notice, no lag
    gone = {"instances": [_row(1, running_at=START + 300, destroyed_at=START + 310)]}
    assert lags(gone, unseen, START, START + 700) == []


def test_a_market_stop_of_a_rental_the_engine_had_let_go_is_no_lag():
    truth = {"instances": [_row(1, outbid_at=[START + 500], actual_status="stopped")]}
    let_go = Notices({1: ((START + 5, Phase.VERIFIED), (START + 400, Phase.STOPPED))}, {})
    late = Notices({1: ((START + 5, Phase.VERIFIED), (START + 800, Phase.STOPPED))}, {})
    assert lags(truth, let_go, START, START + 900) == [0.0]
    assert lags(truth, late, START, START + 900) == [300.0]


def test_a_sized_jobs_end_is_noticed_when_the_engine_marks_it_done_there():
    truth = {
        "instances": [_row(1, running_at=START + 10, actual_status="running")],
        "jobs": [{"instance_id": 1, "job": "fit-1", "done_at": START + 600}],
    }
    notices = Notices(
        {1: ((START + 12, Phase.VERIFIED),)},
        {("fit-1", 1): START + 640},
    )
    assert sorted(lags(truth, notices, START, START + 900)) == [2.0, 40.0]


def test_instances_of_an_earlier_campaign_are_not_this_runs_events():
    truth = {"instances": [_row(1, created_at=START - 50, running_at=START + 5)]}
    assert host_events(truth, START, START + 100) == []


def test_a_run_over_the_bound_is_invalid_and_says_why():
    figures = lag_figures([5.0, 10.0, 400.0])
    assert figures == {"median": 10.0, "max": 400.0, "events": 3}
    valid, why = judge(figures, 120.0)
    assert not valid and why is not None and "400" in why and "120" in why
    assert judge(lag_figures([5.0]), 120.0) == (True, None)
    assert judge(lag_figures([]), 120.0) == (True, None)


def test_the_summary_skips_invalid_runs_and_counts_them():
    base = {"market": 0, "seed": 1, "warm": False, "dud_usd": 0.1, "duds": 1, "false_kills": 0}
    runs = [
        {**base, "policy": "seed", "total_usd": 1.0, "valid": True},
        {**base, "policy": "default", "total_usd": 0.5, "valid": True},
        {**base, "policy": "default", "seed": 2, "total_usd": 9.0, "valid": False},
    ]
    summary = summarise_valid(runs, ["seed", "default"])
    assert summary["default"]["total_usd"] == 0.5  # the invalid 9.0 is left out
    assert summary["default"]["invalid"] == 1 and summary["seed"]["invalid"] == 0
    assert summary["default"]["runs"] == 1


# -- the governor -------------------------------------------------------------------------------


def _governor(scale: float = 600.0) -> tuple[Governor, SimClock]:
    clock, _ = _clock(scale)

    async def no_truth() -> dict[str, object]:
        return {}

    return Governor(clock, 120.0, no_truth, lambda: Notices({}, {}), START), clock


def test_the_governor_slows_a_lagging_market_and_brings_it_back_to_the_nominal_scale():
    gov, clock = _governor()
    gov.step(100.0)  # over half the bound
    assert clock.time_scale == pytest.approx(360.0) and gov.slowdowns == 1
    gov.step(40.0)  # between a quarter and a half: held
    assert clock.time_scale == pytest.approx(360.0)
    for _ in range(50):
        gov.step(0.0)
    assert clock.time_scale == 600.0  # never over the nominal scale
    assert gov.lowest == pytest.approx(360.0)


def test_the_governor_slows_the_market_when_an_ssh_session_costs_too_much_market_time():
    gov, clock = _governor()
    gov.step(0.0, ssh_wall=SSH_BOUND_S / 600 * 2)
    assert clock.time_scale < 600.0
    for _ in range(200):
        gov.step(1e6)
    assert clock.time_scale == pytest.approx(600.0 / MAX_SLOWDOWN)


def test_a_lagging_run_is_rerun_once_slower_and_stays_invalid_if_it_still_lags():
    asked: list[float] = []

    def run_once(scale: float) -> dict[str, object]:
        asked.append(scale)
        return {"valid": scale < 400, "why": None if scale < 400 else "late"}

    again = rerun_if_late(600.0, run_once, lambda s: s / 2)
    assert asked == [600.0, 300.0] and again["valid"] is True
    assert again["rerun"]["why"] == "late"
    asked.clear()
    still = rerun_if_late(1000.0, run_once, lambda s: s / 2)
    assert asked == [1000.0, 500.0] and still["valid"] is False
    asked.clear()
    assert "rerun" not in rerun_if_late(100.0, run_once, lambda s: s / 2) and asked == [100.0]


# -- a run ----------------------------------------------------------------------------------------

CAMPAIGN = """
name = "ref"
image = "img"
image_cuda = "12.0"
disk_gb = 20
offer_query = "num_gpus=1"
max_dph = 1.0
fleet = 1
max_creates = 12
budget_usd = 5.0

[[jobs]]
name = "j"
run = "true"
"""


def test_every_run_reports_its_lag_its_validity_and_the_scales_it_ran_at(tmp_path, capsys):
    import json

    from rentwatch.cli.main import main

    camp = tmp_path / "c.toml"
    camp.write_text(CAMPAIGN)
    args = ["referee", "--campaign", str(camp), "--policies", "seed", "--seeds", "1"]
    assert main([*args, "--deadline-min", "90", "--max-lag-s", "600", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    [run] = out["runs"]
    assert set(run["lag_s"]) == {"median", "max", "events"}
    assert run["lag_s"]["events"] >= 1  # its first host booted, at least
    assert 0 <= run["lag_s"]["median"] <= run["lag_s"]["max"]
    assert run["valid"] is (run["lag_s"]["max"] <= 600) and ("why" in run) is not run["valid"]
    scales = run["time_scale"]
    assert scales["nominal"] == 600 and 0 < scales["lowest"] <= 600
    assert out["summary"]["seed"]["invalid"] == (0 if run["valid"] else 1)


def test_the_governor_hears_the_sims_ssh_sessions():
    from collections import deque
    from types import SimpleNamespace

    from rentwatch.referee.pacing import governed

    clock, _ = _clock()
    walls: deque[float] = deque()

    async def truth() -> dict[str, object]:
        return {}

    sim = SimpleNamespace(
        market=SimpleNamespace(clock=clock, truth=dict),
        ssh=SimpleNamespace(session_walls=walls),
        acall=lambda fn: truth(),
    )
    sup = SimpleNamespace(attempts={}, jobs=SimpleNamespace(jobs=[]))

    async def main() -> list[float]:
        async with governed(sim, sup, START, 120.0) as gov:  # type: ignore[arg-type]
            walls.extend([0.02, 0.3])  # the sim's thread appends as sessions close
            heard = gov.ssh_walls()
            assert gov.ssh_walls() == []  # each session heard once
            return heard

    assert asyncio.run(main()) == [0.02, 0.3]
