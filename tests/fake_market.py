"""The engine's unit tests on the in-memory market (`rentwatch.market.memory`), and a small
campaign for them."""

from __future__ import annotations

from typing import Any

from rentwatch.core.campaign import Campaign
from rentwatch.market.memory.market import Box, MemoryMarket, offer

FakeMarket = MemoryMarket

__all__ = ["Box", "FakeMarket", "campaign", "offer"]


def campaign(name: str = "u", **more: Any) -> Campaign:
    """A small campaign for the in-memory market's tests; `more` overrides any field."""
    base: dict[str, Any] = dict(
        name=name,
        image="img",
        image_cuda=12.4,
        disk_gb=40,
        offer_query={},
        max_dph=0.5,
        fleet=1,
        max_creates=10,
        budget_usd=10.0,
        poll_s=10.0,
    )
    base.update(more)
    return Campaign(**base)
