"""A call to the simulated market takes effect at the one moment stamped on its answer
(`X-Market-Time`), however long a loaded box keeps its handler waiting: the renter dates its
create, stop, start and destroy by that stamp, so a market that acted later would bill a
different span than the renter's ledger (test_service's served campaign: a stop acted on 812
market seconds after its stamp left the ledger $0.029 under the market's bill)."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from rentwatch.sim.api import MarketAPI
from rentwatch.sim.machines import keyed_rng
from rentwatch.sim.market import SimClock, SimMarket
from rentwatch.sim.scenario import parse_scenario

LATE_S = 900.0  # market seconds between a call's arrival and its handler


def _market() -> SimMarket:
    sc = parse_scenario(
        {"seed": 4, "offers": 4, "host_class": [{"behaviour": "healthy", "share": 1.0}]}
    )
    clock = SimClock(1.0, origin=1_764_400_000.0)
    clock.stepped(at=1_764_400_000.0)
    return SimMarket(sc, clock, api_key="k")


def test_create_stop_start_and_destroy_act_at_the_moment_stamped_on_their_answer():
    m = _market()
    auth = {"Authorization": "Bearer k"}

    async def main() -> None:
        async with TestClient(TestServer(_late_client(m))) as client:

            async def put(path: str, body: dict) -> float:
                r = await client.put(path, json=body, headers=auth)
                assert r.status == 200, await r.text()
                return float(r.headers["X-Market-Time"])

            offer = m.machines[0].offer_id
            r = await client.put(f"/api/v0/asks/{offer}/", json={"image": "img"}, headers=auth)
            assert r.status == 200, await r.text()
            created = float(r.headers["X-Market-Time"])
            inst = m.instances[(await r.json())["new_contract"]]
            assert inst.created_at == created

            stopped = await put(f"/api/v0/instances/{inst.id}/", {"state": "stopped"})
            assert inst.stops == [stopped]
            started = await put(f"/api/v0/instances/{inst.id}/", {"state": "running"})
            assert inst.segments[-1].start == started  # a start begins a boot
            r = await client.delete(f"/api/v0/instances/{inst.id}/", headers=auth)
            assert r.status == 200, await r.text()
            assert inst.destroyed_at == float(r.headers["X-Market-Time"])
            # the market's own clock ran on meanwhile: each act was dated back to its stamp
            assert m.clock.now() >= inst.destroyed_at + LATE_S

    asyncio.run(main())


def _late_client(m: SimMarket) -> web.Application:
    api = MarketAPI(m)

    @web.middleware
    async def late(request: web.Request, handler):  # the handler waits on a loaded box
        m.clock.advance(LATE_S)
        return await handler(request)

    app = web.Application(middlewares=[api._every_call, late])
    app.add_routes(api.routes())
    return app


def test_a_bid_change_bills_from_the_moment_stamped_on_its_answer():
    m = _market()
    auth = {"Authorization": "Bearer k"}

    async def main() -> None:
        async with TestClient(TestServer(_late_client(m))) as client:
            offer = m.machines[0].offer_id
            body = {"image": "img", "price": 30.0}  # a bid every rival loses to
            r = await client.put(f"/api/v0/asks/{offer}/", json=body, headers=auth)
            assert r.status == 200, await r.text()
            inst = m.instances[(await r.json())["new_contract"]]
            path = f"/api/v0/instances/bid_price/{inst.id}/"
            r = await client.put(path, json={"client_id": "me", "price": 20.0}, headers=auth)
            assert r.status == 200, await r.text()
            # the new price bills from the call's stamp, not from when its handler ran
            assert inst.prices[-1] == (float(r.headers["X-Market-Time"]), 20.0)

    asyncio.run(main())


def test_an_offer_taken_meanwhile_is_held_from_the_moment_stamped_on_the_refusal():
    sc = parse_scenario(
        {
            "seed": 4,
            "offers": 4,
            "host_class": [{"behaviour": "healthy", "share": 1.0}],
            "listing": {"taken": 1.0},
        }
    )
    m = SimMarket(sc, SimClock(1.0, origin=1_764_400_000.0), api_key="k")
    m.clock.stepped(at=1_764_400_000.0)
    machine = m.machines[0]

    async def main() -> None:
        async with TestClient(TestServer(_late_client(m))) as client:
            r = await client.put(
                f"/api/v0/asks/{machine.offer_id}/",
                json={"image": "img"},
                headers={"Authorization": "Bearer k"},
            )
            assert r.status == 404, await r.text()
            rng = keyed_rng(sc.seed, "taken", machine.id, machine.asked)
            rng.random()
            held = rng.uniform(30, 180) * 60
            assert machine.taken_until == float(r.headers["X-Market-Time"]) + held

    asyncio.run(main())


def test_a_refusal_raised_inside_a_handler_is_answered_in_vasts_error_shape():
    """A route refuses from inside its handler (an instance that is gone, a page token that
    names no offset, a bid out of range): each is answered with its status and Vast's error
    body, never a server error."""
    m = _market()
    auth = {"Authorization": "Bearer k"}
    api = MarketAPI(m)
    app = web.Application(middlewares=[api._every_call])
    app.add_routes(api.routes())

    async def main() -> None:
        async with TestClient(TestServer(app)) as client:
            offer = m.machines[0].offer_id
            r = await client.put(f"/api/v0/asks/{offer}/", json={"image": "img"}, headers=auth)
            gone = (await r.json())["new_contract"]
            r = await client.delete(f"/api/v0/instances/{gone}/", headers=auth)
            assert r.status == 200, await r.text()
            calls = [
                ("put", f"/api/v0/instances/{gone}/", {"state": "stopped"}, 404),
                ("delete", f"/api/v0/instances/{gone}/", None, 404),
                ("put", f"/api/v0/instances/request_logs/{gone}/", {}, 404),
                ("get", f"/api/v0/instances/{gone}/ssh/", None, 404),
                ("put", f"/api/v0/instances/bid_price/{gone}/", {"price": 1.0}, 404),
                ("get", "/api/v1/instances/?after_token=%21%21&order_by=[]", None, 400),
                ("put", f"/api/v0/asks/{m.machines[1].offer_id}/", {"image": "i", "price": 0}, 400),
            ]
            m.clock.advance(60)  # past every pacing interval
            for method, path, body, status in calls:
                r = await getattr(client, method)(path, json=body, headers=auth)
                said = await r.json()
                assert r.status == status, (path, r.status, said)
                assert said["success"] is False and said["error"] in (
                    "no_such_instance",
                    "invalid_args",
                ), (path, said)
                m.clock.advance(60)

    asyncio.run(main())
