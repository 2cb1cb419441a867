"""The client at the market boundary (issues 14 and 19): one bad row costs that row, every call
has a total deadline and an answer cap, refusals inside a 2xx are refusals, the daily search
quota is not retried, creates ask for direct and proxy SSH, and bad prices are not numbers."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator

import httpx
import pytest
from rentwatch.core.errors import MalformedAnswer
from rentwatch.core.lifecycle import Phase
from rentwatch.core.policy import DEFAULT
from rentwatch.engine.attempt import Attempt
from rentwatch.engine.cadence import Sight
from rentwatch.engine.fleet import Fleet
from rentwatch.engine.journal import Journal
from rentwatch.engine.observer import Observer
from rentwatch.ledger import Ledger
from rentwatch.market.errors import (
    AnswerTooLarge,
    ApiError,
    MarketUnavailable,
    NotFound,
    QuotaExceeded,
)
from rentwatch.market.vast.client import VastClient
from rentwatch.market.vast.rows import parse_offer
from rentwatch.market.vast.transport import POLL_ATTEMPTS

from .ledgers import new_ledger


def _client(handler, **kw) -> VastClient:
    kw.setdefault("min_intervals", {})
    return VastClient("http://m", "k", transport=httpx.MockTransport(handler), **kw)


def test_a_bad_row_costs_that_row_only():
    rows = [
        {"id": 1, "dph_total": 0.2, "actual_status": "running"},
        {"id": 2, "dph_total": float("nan")},
        {"id": 3, "dph_total": -0.5},
        {"id": 4, "dph_total": "cheap"},
        {"id": 5, "actual_status": ["running"]},
        "not a row",
        {"id": 6, "dph_total": 0.3, "gpu_util": 1e9},  # a display number out of range: None
    ]

    def handler(request):
        body = json.dumps({"instances": rows, "next_token": None}).replace("NaN", '"NaN"')
        return httpx.Response(200, content=body.encode())

    async def run() -> tuple[list[int], VastClient]:
        c = _client(handler)
        return [i.id for i in await c.list_instances()], c

    ids, c = asyncio.run(run())
    assert ids == [1, 6]
    assert [iid for iid, _ in c.bad_rows] == [2, 3, 4, 5, None]
    assert c.unread_rows()[0] == 5


def test_pages_are_25_at_most():
    seen = []

    def handler(request):
        seen.append(int(request.url.params["limit"]))
        return httpx.Response(200, json={"instances": [], "next_token": None})

    asyncio.run(_client(handler).list_instances(page_size=100))
    assert seen == [25]


def test_success_false_in_a_2xx_and_the_message_key():
    def handler(request):
        if request.method == "DELETE":
            return httpx.Response(200, json={"success": False, "error": "no_such_instance"})
        if request.url.path.startswith("/api/v0/instances/"):
            return httpx.Response(200, json={"success": False, "message": "contract ended"})
        return httpx.Response(400, json={"message": "bad query"})

    async def run() -> None:
        c = _client(handler)
        with pytest.raises(ApiError) as err:
            await c.stop_instance(7)
        assert "contract ended" in str(err.value)
        assert not (await c.destroy_instance(7)).existed  # already gone, said in a 200
        with pytest.raises(ApiError) as err:
            await c.search_offers({})
        assert "bad query" in str(err.value)

    asyncio.run(run())


def test_daily_search_quota_is_not_retried():
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(429, json={"success": False, "error": "search_quota_exceeded"})

    with pytest.raises(QuotaExceeded):
        asyncio.run(_client(handler, max_attempts=5, backoff=0.001).search_offers({}))
    assert len(calls) == 1


def test_a_trickling_answer_meets_the_total_deadline():
    async def trickle() -> AsyncIterator[bytes]:
        for b in b'{"instances": [], "next_token": null}':
            await asyncio.sleep(0.1)
            yield bytes([b])

    def handler(request):
        return httpx.Response(200, content=trickle())

    async def run() -> None:
        c = _client(handler, timeout=0.5, max_attempts=2, backoff=0.01)
        # each try cut at its whole-answer deadline (the error says so), not read to the end
        # of 3.7 s of trickle, which would have been an answer
        with pytest.raises(MarketUnavailable, match="after 2 attempts: .* timed out after 0.5s"):
            await c.list_instances()

    asyncio.run(run())


def test_an_oversized_answer_is_not_read():
    def handler(request):
        return httpx.Response(200, content=b"[" + b" " * 5000 + b"]")

    async def run() -> None:
        c = _client(handler)
        c.max_answer_bytes = 1000
        with pytest.raises(AnswerTooLarge):
            await c.ssh_keys()

    asyncio.run(run())


def test_create_asks_for_direct_and_proxy_ssh_and_new_accounts_have_no_keys():
    bodies = []

    def handler(request):
        if request.url.path == "/api/v0/ssh/":
            return httpx.Response(404, json={"error": "not_found", "msg": "no keys yet"})
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"success": True, "new_contract": 42})

    async def run() -> None:
        c = _client(handler)
        assert (await c.create_instance(9, image="img", disk_gb=10)).instance_id == 42
        assert await c.ssh_keys() == []

    asyncio.run(run())
    assert bodies[0]["runtype"] == "ssh_direc ssh_proxy"


@pytest.mark.parametrize(
    "bad",
    [
        {"dph_total": -0.1},
        {"dph_total": float("inf")},
        {"storage_cost": -1},
        {"dph_base": -2},
        {"inet_up_cost": -0.01},
        {"inet_down_cost": float("nan")},
    ],
)
def test_negative_or_non_finite_prices_make_an_offer_invalid(bad):
    row = {"id": 1, "machine_id": 2, "dph_total": 0.3, **bad}
    with pytest.raises(MalformedAnswer):
        parse_offer(row)


def test_not_found_inside_a_200_is_not_found():
    def handler(request):
        return httpx.Response(200, json={"success": False, "error": "no_such_instance"})

    with pytest.raises(NotFound):
        asyncio.run(_client(handler).stop_instance(3))


def test_a_polls_list_gives_up_after_two_tries_other_calls_keep_retrying():
    """The poll's list calls fail fast (the next poll is the retry): a list that kept retrying
    with backoff left every rental unwatched for seconds of wall time, minutes of a scaled
    market's (the chaos long run: offline hosts seen 5-7 market minutes late)."""
    calls: list[str] = []

    def handler(request):
        calls.append(request.url.path)
        return httpx.Response(503, json={"success": False, "error": "down"})

    async def go() -> None:
        client = _client(handler, backoff=0.001)
        with client.polling(), pytest.raises(MarketUnavailable):
            await client.list_instances()
        assert len(calls) == 2
        calls.clear()
        with pytest.raises(MarketUnavailable):
            await client.list_instances()  # outside a poll (a start's reconcile): every try
        assert len(calls) == client.max_attempts
        await client.aclose()

    asyncio.run(go())


def _observer(client: VastClient, lines: list[str]) -> tuple[Observer, Ledger]:
    ledger = new_ledger()
    journal = Journal(ledger, "c", client, log=lines.append)
    return Observer(client, journal, Fleet(1), DEFAULT), ledger


def test_a_polls_closer_looks_give_up_after_two_tries_too():
    """The instances a sweep left out are asked for one by one (`Observer.observe`); those
    calls went out outside the poll's bound, each with every try and its backoff, so a few
    dozen unseen rentals on a failing market held one poll for minutes."""
    shows: list[str] = []

    def handler(request):
        shows.append(request.url.path)
        return httpx.Response(503, json={"success": False, "error": "down"})

    async def go() -> None:
        client = _client(handler, backoff=0.001)
        obs, ledger = _observer(client, [])
        for iid in (7, 8):
            a = Attempt(iid, None, 70, 7, "RTX 4090", 0.0, 0.3, 0.01)
            a.life = dataclasses.replace(a.life, phase=Phase.VERIFIED)
            obs.fleet.add(a)
        await obs.observe(Sight([], False, swept=set()), 1_000.0)  # a sweep without either
        assert len(shows) == 2 * POLL_ATTEMPTS < 2 * client.max_attempts
        assert all(a.unseen == 1 for a in obs.fleet.attempts.values())
        ledger.close()
        await client.aclose()

    asyncio.run(go())


def test_a_row_without_an_id_is_in_the_ledger_once_per_problem():
    """A row the client cannot read and that names no usable id is skipped in every list
    answer while the market sends it: said every poll, but written to the ledger once per
    distinct problem (it was written every poll, a fact a poll for as long as it lasted)."""
    rows = [{"id": 1, "dph_total": 0.2, "actual_status": "running"}, {"dph_total": 0.1}]

    def handler(request):
        return httpx.Response(200, json={"instances": rows, "next_token": None})

    async def go() -> None:
        client = _client(handler)
        lines: list[str] = []
        obs, ledger = _observer(client, lines)
        for poll in range(3):
            if poll == 2:  # another bad row without an id: a new problem, written once more
                rows.append({"id": "seven", "dph_total": 0.1})
            await obs.observe(Sight(await client.list_instances(), True), 1_000.0 + poll)
        facts = ledger.events(where="kind = 'bad_row'")
        assert len(facts) == 2, [e.reason for e in facts]
        assert facts[0].instance_id is None and "id" in facts[0].reason
        assert sum("skipped this poll" in ln for ln in lines) == 4  # the evidence, every poll
        ledger.close()
        await client.aclose()

    asyncio.run(go())
