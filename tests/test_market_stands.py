"""A standing market (`market_stands`, tests/conftest.py): its time stands while a test takes
wall time, and its clients' pacing runs on, so a controller restarted inside is answered."""

from __future__ import annotations

import httpx
from pytest import approx
from rentwatch.sim.api import PACING
from rentwatch.sim.clock import SimClock
from rentwatch.sim.scenario import parse_scenario
from rentwatch.sim.server import SimServer

from .conftest import market_stands

HDR = {"Authorization": "Bearer test-key"}
LIST = "/api/v1/instances/"
SCALE = 240.0


class Wall:
    """A wall clock that moves only when the test says."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def market_seconds(self, s: float) -> None:
        self.t += s / SCALE


def test_the_pacing_runs_on_at_the_scale_while_the_clock_stands():
    wall = Wall()
    clock = SimClock(SCALE, origin=5000.0, monotonic=wall)
    clock.stand()
    wall.market_seconds(30)
    assert (clock.now(), clock.pacing_now()) == approx((5000, 5030))
    clock.flowing()
    assert (clock.now(), clock.pacing_now()) == approx((5000, 5030))  # no step either way
    wall.market_seconds(10)
    assert (clock.now(), clock.pacing_now()) == approx((5010, 5040))
    clock.advance(5)  # a test's jump moves both
    assert (clock.now(), clock.pacing_now()) == approx((5015, 5045))


def test_a_restart_inside_a_stand_lists_twice_and_a_hammering_client_is_refused():
    """The interleaving that failed on a loaded box: the killed controller's last list, then,
    the market standing, the restarted controller's two lists before it adopts, each a list
    interval of its own time after the one before. Each is answered at the moment the market
    stands at; a list sent at once after another is refused, inside the stand and after it."""
    wall = Wall()
    sim = SimServer(
        parse_scenario({"seed": 3, "offers": 4, "time_scale": SCALE}),
        api_key="test-key",
        clock=SimClock(SCALE, monotonic=wall),
    )
    sim.start_in_thread()
    interval = PACING["list"]
    try:
        with httpx.Client(base_url=sim.url, headers=HDR) as market:
            assert market.get(LIST).status_code == 200  # the killed controller's last list
            with market_stands(sim):
                stood = sim.market.clock.now()
                wall.market_seconds(interval)
                first = market.get(LIST)
                assert market.get(LIST).status_code == 429  # no interval: refused
                wall.market_seconds(interval)
                second = market.get(LIST)
                for answer in (first, second):
                    assert answer.status_code == 200, answer.text
                    assert float(answer.headers["X-Market-Time"]) == approx(stood, abs=1e-3)
            assert market.get(LIST).status_code == 429  # the stand's pacing carried on
            wall.market_seconds(interval)
            after = market.get(LIST)
            assert after.status_code == 200
            assert float(after.headers["X-Market-Time"]) == approx(stood + interval, abs=1e-3)
    finally:
        sim.stop_thread()
