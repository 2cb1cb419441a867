"""The referee's time: a stepped market clock that stands while any exchange is out and jumps
to the earliest wait's end when every party waits; each run's lag (a host's event to the
engine's notice), and a run over the bound marked invalid, never scored silently."""

from __future__ import annotations

import asyncio

import pytest
from rentwatch.core.lifecycle import Lifecycle, Phase
from rentwatch.referee.lag import (
    HostEvent,
    host_events,
    lags,
    noticed_at,
    timing,
)
from rentwatch.referee.score import RunFacts, summarise
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


def test_a_stepped_clock_stands_whatever_the_wall_does_and_moves_only_when_stepped():
    clock, wall = _clock(600)
    wall.t += 1.0
    assert clock.now() == pytest.approx(1_000_600.0)  # wall-paced until stepped
    clock.stepped()
    wall.t += 1000.0
    assert clock.now() == pytest.approx(1_000_600.0)
    clock.advance(30.0)
    clock.advance(-5.0)  # never backwards
    assert clock.now() == pytest.approx(1_000_630.0)


def test_a_hold_keeps_the_clock_busy_until_its_stall_cap_and_a_silent_host_holds_nothing():
    clock, wall = _clock()
    clock.stepped()
    assert not clock.busy(5.0)
    with clock.held(7):  # an SSH session with instance 7
        assert clock.busy(5.0)
        assert not clock.busy(5.0, silent=lambda subject: subject == 7)
        wall.t += 4.0
        with clock.held():  # a call to the market, later
            wall.t += 2.0
            assert clock.busy(5.0)  # the call is young; the session is stalled
        assert not clock.busy(5.0)  # a session out for 6 wall seconds no longer holds
    assert clock.holds == 0


def test_a_wait_on_the_clock_lifts_the_waiters_own_hold_and_no_other():
    clock, wall = _clock()
    clock.stepped()

    async def main() -> None:
        other = asyncio.Event()

        async def holder() -> None:
            with clock.held():
                await other.wait()

        task = asyncio.create_task(holder())
        await asyncio.sleep(0)
        with clock.held():
            assert clock.holds == 2
            with clock.waited_on():  # a call paced in market seconds
                assert clock.holds == 1  # the other task's hold stays
                wall.t += 10.0
            assert clock.holds == 2 and clock.busy(5.0)  # taken up again, afresh
        other.set()
        await task
        assert clock.holds == 0

    asyncio.run(main())


def test_the_stepped_loop_stands_while_an_exchange_is_out_and_jumps_when_all_wait():
    """The engine's waits are the loop's: a wait of an hour of market time ends at that market
    time exactly, however long the box took; while a call or an SSH session is out the clock
    does not move, however long it takes in wall time; when every party waits, the clock jumps
    to the earliest wait's end, and the hosts are settled at each jump."""
    import threading

    from rentwatch.referee.stepped import SteppedLoop, stepped_clock

    clock = stepped_clock(origin=5_000.0)
    settled: list[float] = []
    seen: dict[str, float] = {}

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def poller() -> None:
            for _ in range(3):
                await asyncio.sleep(10.0)  # the poll cadence: market seconds
            seen["poller"] = clock.now()

        async def session() -> None:
            await asyncio.sleep(5.0)
            answer = loop.create_future()
            # the host answers after 0.3 wall seconds, from another thread (the sim's)
            threading.Timer(0.3, loop.call_soon_threadsafe, (answer.set_result, None)).start()
            with clock.held(42):
                seen["sent"] = clock.now()
                await answer
                seen["answered"] = clock.now()

        async def sleeper() -> None:
            await asyncio.sleep(3600.0)
            seen["sleeper"] = clock.now()

        await asyncio.gather(poller(), session(), sleeper())

    with asyncio.Runner(
        loop_factory=lambda: SteppedLoop(clock, lambda: settled.append(clock.now()))
    ) as runner:
        runner.run(main())
    assert seen["sent"] == pytest.approx(5_005.0, abs=1e-3)
    assert seen["answered"] == seen["sent"]  # 0.3 wall seconds out: no market time passed
    assert seen["poller"] == pytest.approx(5_030.0, abs=1e-3)
    assert seen["sleeper"] == pytest.approx(8_600.0, abs=1e-3)
    # one jump per distinct wake (5, 10, 20, 30, 3600 s), each settled before anything ran
    assert settled == pytest.approx([5_005.0, 5_010.0, 5_020.0, 5_030.0, 8_600.0], abs=1e-3)


def test_a_pace_cap_makes_a_jump_wait_in_wall_time_and_changes_no_market_time():
    """`--time-scale`: with a cap, a jump of J market seconds waits until J / cap wall seconds
    passed since the last jump; the market times the engine sees are the same as without."""
    import time

    from rentwatch.referee.stepped import SteppedLoop, SteppedSelector, stepped_clock

    free = SteppedSelector(stepped_clock(), lambda: None, lambda: 0.0)
    assert free.pause_for(3600.0) == 0.0
    capped = SteppedSelector(stepped_clock(), lambda: None, lambda: 0.0, max_pace=100.0)
    capped.last_step_wall = time.monotonic() + 1000.0  # a jump just made, far in the future
    assert capped.pause_for(10.0) > 1000.0  # 10 market s at 100x: 0.1 wall s after it
    capped.last_step_wall = time.monotonic() - 1000.0  # long ago: no wait left
    assert capped.pause_for(10.0) < 0

    def woke(max_pace: float | None) -> list[float]:
        clock = stepped_clock(origin=0.0)
        seen: list[float] = []

        async def main() -> None:
            for _ in range(3):
                await asyncio.sleep(2.0)
                seen.append(clock.now())

        with asyncio.Runner(
            loop_factory=lambda: SteppedLoop(clock, lambda: None, max_pace=max_pace)
        ) as runner:
            runner.run(main())
        return seen

    assert woke(None) == pytest.approx([2.0, 4.0, 6.0], abs=1e-3)
    assert woke(200.0) == pytest.approx(woke(None), abs=1e-3)


def test_a_session_with_a_host_that_never_answers_holds_the_clock_no_longer_than_the_cap():
    from rentwatch.referee.stepped import SteppedLoop, stepped_clock

    clock = stepped_clock(origin=0.0)

    async def main() -> float:
        with clock.held(9):  # a host that accepts and never says a word
            try:
                await asyncio.wait_for(asyncio.Event().wait(), 20.0)  # its connect timeout
            except TimeoutError:
                return clock.now()
        raise AssertionError("the timeout never came")

    with asyncio.Runner(
        loop_factory=lambda: SteppedLoop(clock, lambda: None, silent=lambda s: s == 9)
    ) as runner:
        assert runner.run(main()) == pytest.approx(20.0, abs=1e-3)


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
    moves = {1: ((START + 5, Phase.BOOTING), (START + 330, Phase.RUNNING))}
    facts = RunFacts(START, START + 1000, 1, moves)
    [event] = host_events(truth, START, START + 1000)
    assert event == HostEvent("boot", 1, START + 300)
    assert noticed_at(event, facts) == START + 330
    assert lags(truth, facts) == [30.0]


def test_an_event_not_yet_noticed_counts_with_its_age_while_the_engine_could_see_it():
    truth = {"instances": [_row(1, running_at=START + 300, actual_status="running")]}
    unseen = RunFacts(START, START + 700, 1, {1: ((START + 5, Phase.BOOTING),)})
    assert lags(truth, unseen) == [400.0]
    # gone before the engine could look: nothing to notice, no lag
    gone = {"instances": [_row(1, running_at=START + 300, destroyed_at=START + 310)]}
    assert lags(gone, unseen) == []


def test_a_market_stop_of_a_rental_the_engine_had_let_go_is_no_lag():
    truth = {"instances": [_row(1, outbid_at=[START + 500], actual_status="stopped")]}
    let_go = {1: ((START + 5, Phase.VERIFIED), (START + 400, Phase.STOPPED))}
    late = {1: ((START + 5, Phase.VERIFIED), (START + 800, Phase.STOPPED))}
    assert lags(truth, RunFacts(START, START + 900, 1, let_go)) == [0.0]
    assert lags(truth, RunFacts(START, START + 900, 1, late)) == [300.0]


def test_a_sized_jobs_end_is_noticed_when_the_engine_marks_it_done_there():
    truth = {
        "instances": [_row(1, running_at=START + 10, actual_status="running")],
        "jobs": [{"instance_id": 1, "job": "fit-1", "done_at": START + 600}],
    }
    moves = {1: ((START + 12, Phase.VERIFIED),)}
    facts = RunFacts(START, START + 900, 1, moves, jobs_done={("fit-1", 1): START + 640})
    assert sorted(lags(truth, facts)) == [2.0, 40.0]


def test_instances_of_an_earlier_campaign_are_not_this_runs_events():
    truth = {"instances": [_row(1, created_at=START - 50, running_at=START + 5)]}
    assert host_events(truth, START, START + 100) == []


def test_a_run_over_the_bound_is_invalid_and_says_why():
    truth = {
        "instances": [_row(i, running_at=START + 100, actual_status="running") for i in (1, 2, 3)]
    }
    moves = {i: ((START + 100 + lag, Phase.RUNNING),) for i, lag in ((1, 5), (2, 10), (3, 400))}
    facts = RunFacts(START, START + 900, 1, moves)
    out = timing(facts, truth, 120.0, 60.0)
    assert out["lag_s"] == {"median": 10.0, "max": 400.0, "events": 3}
    assert not out["valid"] and "400" in out["why"] and "120" in out["why"]
    assert out["time_scale"] == {"effective": 60.0}
    assert timing(facts, truth, 400.0, 60.0)["valid"]
    quiet = timing(RunFacts(START, START + 900, 1), {"instances": []}, 120.0, 60.0)
    assert quiet["lag_s"] == {"median": None, "max": None, "events": 0}
    assert quiet["valid"] and "why" not in quiet


def test_the_summary_skips_invalid_runs_and_counts_them():
    base = {"market": 0, "seed": 1, "warm": False, "dud_usd": 0.1, "duds": 1, "false_kills": 0}
    runs = [
        {**base, "policy": "seed", "total_usd": 1.0, "valid": True},
        {**base, "policy": "default", "total_usd": 0.5, "valid": True},
        {**base, "policy": "default", "seed": 2, "total_usd": 9.0, "valid": False},
    ]
    summary = summarise(runs, ["seed", "default"])
    assert summary["default"]["total_usd"] == 0.5  # the invalid 9.0 is left out
    assert summary["default"]["invalid"] == 1 and summary["seed"]["invalid"] == 0
    assert summary["default"]["runs"] == 1


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
    assert scales["effective"] > 0
    assert out["summary"]["seed"]["invalid"] == (0 if run["valid"] else 1)


def test_an_ssh_session_and_a_call_to_the_market_hold_the_shared_clock_while_out():
    """The engine's two kinds of exchange hold the market's clock while out: a session with a
    host (held for that instance, so a host that never answers can be told apart) and a call
    to the market (the client's exchange)."""
    from types import SimpleNamespace
    from typing import Any

    import asyncssh
    from rentwatch.engine.hosts.link import HostLink
    from rentwatch.engine.hosts.ssh import RunResult, SSHRunner
    from rentwatch.market.vast.client import VastClient

    clock, _ = _clock()
    clock.stepped()
    seen: list[tuple[int, object]] = []
    ssh = SSHRunner(asyncssh.generate_private_key("ssh-ed25519"), hold=clock.held)

    async def run(iid: int, *args: Any, **kw: Any) -> RunResult:
        seen.append((clock.holds, [s for _, s in clock._holding.values()][0]))
        return RunResult(0, b"", b"", False)

    ssh.run = run  # type: ignore[method-assign]
    market: Any = SimpleNamespace(time_scale=1.0, now=clock.now)
    link = HostLink(ssh, market, journal=_no_ledger())  # type: ignore[arg-type]
    host: Any = SimpleNamespace(
        instance_id=31,
        ssh_host="127.0.0.2",
        ssh_port=2222,
        offer=None,
        silent_since=None,
        life=Lifecycle(),
    )
    link.keyed.add(31)
    asyncio.run(link.run(host, "true"))
    assert seen == [(1, 31)] and clock.holds == 0

    client = VastClient("http://127.0.0.1:9", "k")
    client.share_clock(clock)

    async def exchange(*args: Any) -> Any:
        seen.append((clock.holds, None))
        return SimpleNamespace(status_code=200, headers={})

    client._exchange = exchange  # type: ignore[method-assign]
    asyncio.run(client._send("GET", "http://127.0.0.1:9/x", None, None, 1.0))
    assert seen[-1] == (1, None) and clock.holds == 0


# -- the same run on any box -------------------------------------------------------------------


def _answered_in(order: list[int], gap_s: float = 0.05) -> tuple[list[tuple[int, float]], int]:
    """Four exchanges go out at once on a stepped loop; the box answers them in `order`, one
    every `gap_s` wall seconds, from another thread (as the simulator's does). What each
    holder then did, in the order it did it, and at which market second."""
    import threading

    from rentwatch.referee.stepped import SteppedLoop, stepped_clock

    clock = stepped_clock(origin=0.0)
    done: list[tuple[int, float]] = []
    went: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        answers = [loop.create_future() for _ in range(4)]

        def answer() -> None:
            for k, i in enumerate(order):
                args = (answers[i].set_result, i)
                threading.Timer(gap_s * k, loop.call_soon_threadsafe, args).start()

        async def exchange(i: int) -> None:
            await asyncio.sleep(5.0)  # all four go out at market second 5
            went.append(i)
            async with clock.held(i):
                if i == 3:
                    answer()
                await answers[i]
            done.append((i, clock.now()))
            await asyncio.sleep(1.0)  # what the engine does next waits on market time
            done.append((i + 10, clock.now()))

        await asyncio.gather(*(exchange(i) for i in range(4)))

    with asyncio.Runner(loop_factory=lambda: SteppedLoop(clock, lambda: None)) as runner:
        runner.run(main())
    assert [i for i, _ in done[:4]] == went  # in the order they went out
    return done, clock.holds


def test_answers_of_exchanges_out_at_once_go_on_in_the_order_they_went_out():
    """The box decides the order in which exchanges out at once come back (two hosts'
    sessions, a poll and a tender): the stepped loop hands the answers on in the order the
    exchanges went out, whatever order they came back in, so the engine decides the same
    things in the same order on any box."""
    first, holds = _answered_in([0, 1, 2, 3])
    assert sorted(i for i, _ in first) == [0, 1, 2, 3, 10, 11, 12, 13] and holds == 0
    assert [t for _, t in first] == pytest.approx([5.0] * 4 + [6.0] * 4, abs=1e-3)
    for order in ([3, 2, 1, 0], [2, 0, 3, 1], [1, 3, 0, 2]):
        assert _answered_in(order) == (first, 0), order


def test_an_answer_waits_for_no_exchange_out_to_a_host_that_never_answers():
    """A session with a host the referee knows will never answer holds no time; an answer
    that came back after it went out does not wait on it either (it would wait for good),
    nor on one stalled past the cap; it waits on any other exchange that went out before."""
    from rentwatch.referee.stepped import SteppedLoop, stepped_clock

    async def turns() -> list[bool]:
        clock, wall = _clock()
        clock.stepped()
        clock.order_answers()
        go = asyncio.Event()

        async def call() -> None:  # a call to the market, made after the sessions went out
            await go.wait()
            async with clock.held():
                pass  # back at once

        went: list[bool] = []
        task = asyncio.create_task(call())
        with clock.held(9), clock.held(7):  # two sessions out, one to a host that never answers
            go.set()
            await asyncio.sleep(0)
            went.append(clock.release_next(5.0, silent=lambda s: s == 9))  # 7 is still out
            went.append(clock.release_next(5.0, silent=lambda s: s in (7, 9)))
        await _end(task)
        go.clear()
        task = asyncio.create_task(call())
        with clock.held(7):
            go.set()
            await asyncio.sleep(0)
            wall.t += 6.0  # 7 is out past the stall cap
            went.append(clock.release_next(5.0))
        await _end(task)
        return went

    assert asyncio.run(turns()) == [False, True, True]

    clock = stepped_clock(origin=0.0)
    seen: list[tuple[str, float]] = []

    async def main() -> None:
        async def dead() -> None:
            async with clock.held(9):
                try:
                    await asyncio.wait_for(asyncio.Event().wait(), 20.0)
                except TimeoutError:
                    seen.append(("dead timed out", clock.now()))

        async def live() -> None:
            await asyncio.sleep(0)
            async with clock.held(1):
                await asyncio.sleep(0)  # an answer at once
            seen.append(("live answered", clock.now()))

        await asyncio.gather(dead(), live())

    with asyncio.Runner(
        loop_factory=lambda: SteppedLoop(clock, lambda: None, silent=lambda s: s == 9)
    ) as runner:
        runner.run(main())
    assert seen == [("live answered", 0.0), ("dead timed out", pytest.approx(20.0, abs=1e-3))]


async def _end(task: asyncio.Task) -> None:
    """The task goes on if it was let go; else it is ended (no loop here to let it go)."""
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_calls_to_a_market_on_a_shared_clock_go_out_one_at_a_time_in_order():
    """Two calls out at once would reach the simulator in the box's order, and each answer
    says what the market was when it arrived (a poll that sees a create or not): on a shared
    clock the client sends them one at a time, in the order they were made."""
    from types import SimpleNamespace
    from typing import Any

    from rentwatch.market.vast.client import VastClient

    clock, _ = _clock()
    clock.stepped()
    client = VastClient("http://127.0.0.1:9", "k")
    client.share_clock(clock)
    out: list[str] = []
    seen: list[str] = []

    async def exchange(method: str, url: str, *args: Any) -> Any:
        out.append(url)
        seen.append(f"out {url[-1]} ({len(out)} out)")
        await asyncio.sleep(0.02 if url.endswith("a") else 0.0)  # the first answers last
        out.remove(url)
        return SimpleNamespace(status_code=200, headers={})

    client._exchange = exchange  # type: ignore[method-assign]

    async def main() -> None:
        await asyncio.gather(
            *(client._send("GET", f"http://127.0.0.1:9/{x}", None, None, 1.0) for x in "abc")
        )

    asyncio.run(main())
    assert seen == ["out a (1 out)", "out b (1 out)", "out c (1 out)"]


def test_reading_the_markets_clock_holds_the_shared_clock_too():
    """The first exchange of a run (the session reads the simulator's clock) held nothing: a
    stepped clock could move past its timeout while the box was slow to answer, and a run
    started 20 market seconds late or not, by the box (seen: one bill in two, loaded)."""
    from types import SimpleNamespace
    from typing import Any

    from rentwatch.market.vast.client import VastClient

    clock, _ = _clock()
    clock.stepped()
    client = VastClient("http://127.0.0.1:9", "k")
    client.share_clock(clock)
    holds: list[int] = []

    async def get(url: str, **kw: Any) -> Any:
        holds.append(clock.holds)
        return SimpleNamespace(status_code=500)

    client._http = SimpleNamespace(get=get)  # type: ignore[assignment]
    asyncio.run(client.sync_clock())
    assert holds == [1] and clock.holds == 0


def _no_ledger() -> object:
    """A journal with nothing but the rentals' writer: these looks write no ledger event."""
    from types import SimpleNamespace

    from rentwatch.engine.rentals import Writer

    return SimpleNamespace(writer=Writer(None))  # type: ignore[arg-type]
