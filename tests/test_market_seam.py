"""The `Market` seam: both markets answer every call the protocol names and say what else they
can do in `caps`; the factory is how a command gets one."""

from __future__ import annotations

import asyncio
import inspect

from rentwatch.core.models import Status
from rentwatch.market.factory import DEFAULT_URL, open_market
from rentwatch.market.memory.market import MemoryMarket
from rentwatch.market.protocol import Capabilities, ListFilter, Market
from rentwatch.market.vast.client import VastClient, select_filters


def _protocol_names() -> set[str]:
    names = {n for n, _ in inspect.getmembers(Market) if not n.startswith("_")}
    for cls in Market.__mro__:
        names |= {n for n in getattr(cls, "__annotations__", {}) if not n.startswith("_")}
    return names


def test_both_markets_answer_every_call_the_protocol_names():
    names = _protocol_names()
    assert {"caps", "polling", "unread_rows", "list_page", "search_offers", "base_url"} <= names
    vast = open_market("http://127.0.0.1:9", "k")
    try:
        for market in (MemoryMarket(), vast):
            missing = sorted(n for n in names if not hasattr(market, n))
            assert not missing, (type(market).__name__, missing)
            assert isinstance(market.caps, Capabilities)
    finally:
        asyncio.run(vast.aclose())


def test_the_factory_opens_the_vast_api_at_the_address_given_or_the_default():
    async def go() -> tuple[str, str, Capabilities]:
        a, b = open_market(None, "k"), open_market("http://127.0.0.1:9/", "k")
        try:
            assert isinstance(a, VastClient) and isinstance(b, VastClient)
            return a.base_url, b.base_url, a.caps
        finally:
            await a.aclose()
            await b.aclose()

    default, given, caps = asyncio.run(go())
    assert (default, given) == (DEFAULT_URL, "http://127.0.0.1:9")
    assert caps.paging and caps.bids and caps.market_clock and caps.charges


def test_a_list_filter_in_vast_words():
    where = ListFilter(labels=["rw:c:a"], statuses=(Status.EXITED,))
    assert select_filters(where) == {
        "label": {"in": ["rw:c:a"]},
        "actual_status": {"in": ["exited"]},
    }
    assert select_filters(None) == {}
    assert not MemoryMarket.caps.paging  # the poll plan lists the in-memory market whole
