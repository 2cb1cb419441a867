"""The engine's unit tests on the in-memory market (`rentwatch.market.memory`), and a small
campaign and offers for them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rentwatch.core.campaign import Campaign
from rentwatch.core.models import Offer
from rentwatch.market.memory.market import Box, MemoryMarket

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


def offer(oid: int, machine: int, dph: float = 0.2, gpu: str = "RTX 3090", **more: Any) -> Offer:
    """An offer of the in-memory market's kind; `more` overrides any field."""
    made = Offer(
        id=oid,
        machine_id=machine,
        host_id=machine * 10,
        gpu_name=gpu,
        num_gpus=1,
        dph_total=dph,
        gpu_dph=dph,
        storage_cost=0.1,
        cuda_max_good=12.4,
        reliability=0.99,
        driver_version="550.54",
        gpu_ram_mb=24_000,
        geolocation="SE",
        dlperf=None,
    )
    return replace(made, **more)
