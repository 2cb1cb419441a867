"""The one place a market is picked: the CLI, the controller, the session and reconcile ask
`open_market`, and never name a market's client. Every URL names a Vast.ai API (the real one,
`DEFAULT_URL`, or `rentwatch sim`); the in-memory market is built by the tests that use it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial

from ..core.campaign import Campaign, parse_campaign
from .protocol import Market, SharedClock
from .vast.defaults import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from .vast.defaults import REAL_MARKET
from .vast.keys import find_api_key as find_api_key
from .vast.query import parse_query

DEFAULT_URL = REAL_MARKET  # the market a command acts on unless given `--market-url`


def load_campaign(text: str, source: str = "campaign") -> Campaign:
    """A campaign file's text, its `offer_query` read in the official CLI's query language."""
    return parse_campaign(text, source, partial(parse_query, keep_wildcards=True))


def open_market(
    url: str | None,
    api_key: str,
    *,
    timeout: float | None = None,
    clock: SharedClock | None = None,
) -> Market:
    """The market at `url` (None: `DEFAULT_URL`), on `api_key`. `clock`: a simulator's clock
    in this process, read directly (the referee's, whose scale it may change)."""
    from .vast.client import VastClient

    client = VastClient(url or DEFAULT_URL, api_key, timeout=timeout)
    if clock is not None:
        client.share_clock(clock)
    return client


@contextlib.asynccontextmanager
async def market_at(
    url: str | None, api_key: str, *, timeout: float | None = None
) -> AsyncIterator[Market]:
    """`open_market` for one command's while, its clock read where it has one, then closed."""
    market = open_market(url, api_key, timeout=timeout)
    try:
        if market.caps.market_clock:
            await market.sync_clock()
        yield market
    finally:
        await market.aclose()
