"""The marketplace client: typed errors, retries under faults, no duplicate creates."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from rentwatch.core.errors import MalformedAnswer
from rentwatch.market.errors import AuthError, MarketUnavailable, NotFound
from rentwatch.market.vast.client import VastClient
from rentwatch.market.vast.keys import find_api_key
from rentwatch.market.vast.rows import parse_instance, parse_offer
from rentwatch.referee.stepped import run_stepped


def test_faulty_market_long_sequence_no_duplicate_create(make_sim):
    """On a stepped clock shared by the client and the market: market time moves only when
    nothing is out, so each change's date is exact, lost answers included, on any box."""
    sim = make_sim(
        seed=9,
        offers=40,
        stepped=True,
        faults={
            "rate_429": 0.10,
            "rate_5xx": 0.05,
            # about 7 lost answers expected over the 90 changes; at 0.05 (4.5 expected) about
            # one run in 90 drew none and failed its "a lost answer was exercised" check
            "rate_timeout": 0.08,
            "rate_malformed": 0.02,
            # wall seconds the market sits on an answer: past the stall cap below, so the
            # clock moves on to the client's timeout (a market minute) meanwhile
            "timeout_s": 3.0,
        },
    )
    clock = sim.market.clock
    dated: list[tuple[int, str, float, bool]] = []
    tries: list[str | None] = []  # what became of the try before each one, as it went out

    async def run() -> list[int]:
        # a call out for 1.5 wall seconds (the market sitting on its answer) holds the clock
        # no longer: generous for a loaded box to answer a loopback call, short for the test
        asyncio.get_running_loop().stepper.stall_cap_s = 1.5  # type: ignore[attr-defined]
        c = VastClient(
            sim.url, "test-key", timeout=60.0, backoff=1.0, max_attempts=8, min_intervals={}
        )
        c.share_clock(clock)
        await c.sync_clock()
        created = []
        for _ in range(30):
            offers = await c.search_offers({})
            res = await c.create_instance(offers[0].id, image="img", disk_gb=10, label="t")
            created.append(res.instance_id)
            await c.list_instances()
            for kind, act in (
                ("stop", c.stop_instance),
                ("start", c.start_instance),
                ("destroy", c.destroy_instance),
            ):
                acted = await act(res.instance_id, lambda at, prev: tries.append(prev))
                assert acted.existed
                dated.append((res.instance_id, kind, acted.at, acted.answer_lost))
        await c.aclose()
        return created

    created = run_stepped(sim, run())
    truth = sim.call(sim.market.truth)
    assert len(truth["instances"]) == len(created) == len(set(created)), "a retry created twice"
    assert all(r["destroyed_at"] for r in truth["instances"])
    assert sum(sim.api.faults_injected.values()) > 20
    # each change is dated to when the market made it, lost answers included: the clock stood
    # while each try was out, so the date is the market's to its answer stamp's millisecond
    # (a lost answer dated by its retry would be off by the client's 60 s timeout and more)
    market = sim.market.instances
    lost = 0
    for iid, kind, at, answer_lost in dated:
        inst = market[iid]
        actual = {
            "stop": inst.stops[0],
            "start": inst.segments[1].start,
            "destroy": inst.destroyed_at,
        }
        assert abs(at - actual[kind]) <= 0.001, (kind, at - actual[kind], answer_lost)
        lost += answer_lost
    assert lost > 0, "no lost answer was exercised"
    assert tries.count(None) == len(dated) and {"refused", "lost"} <= set(tries)


def test_typed_errors(make_sim):
    sim = make_sim(offers=3)

    async def run() -> None:
        async with VastClient(sim.url, "wrong", min_intervals={}) as bad:
            with pytest.raises(AuthError):
                await bad.list_instances()
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            with pytest.raises(NotFound):
                await c.stop_instance(12345)
            assert not (await c.destroy_instance(12345)).existed  # already gone counts as done
            assert await c.show_instance(12345) is None
        async with VastClient(
            "http://127.0.0.1:9", "k", max_attempts=2, backoff=0.01, min_intervals={}
        ) as dead:
            with pytest.raises(MarketUnavailable):
                await dead.list_instances()

    asyncio.run(run())


def _transport(handler):
    return httpx.MockTransport(handler)


@pytest.mark.parametrize("body", [b"{not json", b'{"instances": 5}', b"[]"])
def test_malformed_list_answers(body):
    async def run() -> None:
        c = VastClient(
            "http://m",
            "k",
            transport=_transport(lambda r: httpx.Response(200, content=body)),
            min_intervals={},
        )
        with pytest.raises(MalformedAnswer):
            await c.list_instances()

    asyncio.run(run())


def test_rate_limit_bodies_are_retried_then_reported():
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(429, text="API requests too frequent")

    async def run() -> None:
        c = VastClient(
            "http://m",
            "secret-key-123",
            transport=_transport(handler),
            max_attempts=3,
            backoff=0.001,
            min_intervals={},
        )
        with pytest.raises(MarketUnavailable) as err:
            await c.list_instances()
        assert "secret-key-123" not in str(err.value) and "secret-key-123" not in repr(c)

    asyncio.run(run())
    assert len(calls) == 3
    assert calls[0].headers["Authorization"] == "Bearer secret-key-123"


def test_pacing_respects_min_interval():
    stamps = []

    def handler(request):
        import time

        stamps.append(time.monotonic())
        return httpx.Response(200, json={"instances": [], "next_token": None})

    async def run() -> None:
        c = VastClient("http://m", "k", transport=_transport(handler), min_intervals={"list": 0.05})
        for _ in range(4):
            await c.list_instances()

    asyncio.run(run())
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert min(gaps) >= 0.045


def test_paging_follows_next_token():
    pages = {None: ([{"id": 1}, {"id": 2}], "t1"), "t1": ([{"id": 3}], None)}

    def handler(request):
        rows, nxt = pages[request.url.params.get("after_token")]
        return httpx.Response(200, json={"instances": rows, "next_token": nxt})

    async def run() -> list[int]:
        c = VastClient("http://m", "k", transport=_transport(handler), min_intervals={})
        return [i.id for i in await c.list_instances(page_size=2)]

    assert asyncio.run(run()) == [1, 2, 3]


@pytest.mark.parametrize(
    "row",
    [
        {},
        {"id": "x"},
        {"id": 1.5},
        {"id": 1, "dph_total": "NaN"},
        {"id": 1, "dph_total": [1]},
        "str",
        None,
        {"id": 10**30},
    ],
)
def test_instance_parsing_rejects_garbage(row):
    with pytest.raises(MalformedAnswer):
        parse_instance(row)


def test_instance_parsing_coerces_and_tolerates():
    i = parse_instance(
        {
            "id": "7",
            "dph_total": "0.5",
            "actual_status": "weird",
            "status_msg": "x" * 10_000,
            "ports": {"22/tcp": [{"HostPort": "2222"}]},
        }
    )
    assert i.id == 7 and i.dph_total == 0.5 and i.known_status == "unknown"
    assert len(i.status_msg) == 4096 and i.ssh_port == 2222
    with pytest.raises(MalformedAnswer):
        parse_offer({"id": 1, "machine_id": 2})


def test_a_stopped_contract_reads_in_rentwatchs_words():
    """Vast's `inactive` state is read as rentwatch's `stopped` by the client, so the core's
    notion of a market stop knows no Vast word."""
    base = {"id": 1, "dph_total": 0.5, "actual_status": "stopped"}
    said = {"intended_status": "stopped", "cur_state": "inactive", "next_state": "Inactive"}
    row = parse_instance(base | said)
    assert (row.target_state, row.current_state, row.next_state) == ("stopped",) * 3
    assert row.market_stopped
    assert not parse_instance(base | said | {"next_state": "running"}).market_stopped


def test_api_key_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    from rentwatch.market.vast.keys import NoApiKey

    with pytest.raises(NoApiKey):
        find_api_key()
    (tmp_path / ".config" / "vastai").mkdir(parents=True)
    (tmp_path / ".config" / "vastai" / "vast_api_key").write_text("filekey\n")
    assert find_api_key() == "filekey"
    monkeypatch.setenv("VAST_API_KEY", "envkey")
    assert find_api_key() == "envkey"
    assert find_api_key("argkey") == "argkey"
