"""The client's reading of market time from answers' `X-Market-Time` stamps. Answers come back in
the box's order, not the order the market stamped them: a list stamped early and answered late
must not wind the clock back, or a change whose answer is lost is dated (at its send) before
moments the client already saw (the chaos run's stop billed $0.008 under the market's)."""

from __future__ import annotations

import asyncio

import httpx
from rentwatch.market.vast.client import VastClient


def test_an_answer_stamped_earlier_than_one_seen_does_not_wind_the_clock_back():
    stamps = iter([1_000_200.0, 1_000_100.0])  # the second answer was stamped first

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"success": True}, headers={"X-Market-Time": str(next(stamps))}
        )

    async def main() -> None:
        c = VastClient("http://m", "k", transport=httpx.MockTransport(handler), min_intervals={})
        c.time_scale = 1.0
        await c.stop_instance(7)
        acted = await c.stop_instance(8)
        assert acted.at == 1_000_100.0  # each change is dated by its own answer's stamp
        assert c.now() >= 1_000_200.0  # the clock runs on from the latest moment seen
        await c.aclose()

    asyncio.run(main())
