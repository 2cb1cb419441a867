"""A host's price increases pending on our rentals, and our answer to each (vast-cli PR #401: vastai
1.9.1 `api/price_increase.py`, `cli/commands/price_increase.py`).

`GET /api/v0/instances/pending-price-increases/` lists rows with the rental (`contract_id`), old
and new per-second prices (a null `new_*`: unchanged) and `contract_end_date`; accept and reject
take exactly `{"pending_price_increase_id": <int>}`; a row no longer pending answers 404 (older
backends: 409). An unreadable row is skipped and counted, never the whole answer."""

from __future__ import annotations

import contextlib
import math
from typing import Any

from ...core.errors import MalformedAnswer
from ...core.worth.price_increase import PriceIncrease
from ..errors import ApiError
from .rows import MAX_DPH
from .transport import Transport

PENDING_PATH = "/api/v0/instances/pending-price-increases/"
NO_PENDING = "no_pending_price_increase"
OTHERS = ("bwu_cost", "bwd_cost", "platform_fee")
# no source gives these routes a minimum interval: their own kind, not paced (transport.py)
KIND = "price_increase"


def _id(row: dict[str, Any], key: str) -> int:
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise MalformedAnswer(f"pending price increase: {key} is not a positive integer")
    return v


def _rate(
    row: dict[str, Any], key: str, what: str = "a price", cap: float = MAX_DPH
) -> float | None:
    """A per-second price (or a time): None when absent or null (unchanged), else finite, >= 0."""
    v = row.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise MalformedAnswer(f"pending price increase: {key} is not {what}")
    if v * 3600 > cap:  # $/h
        raise MalformedAnswer(f"pending price increase: {key} is beyond any market's price")
    return float(v)


def _hourly(v: float | None) -> float | None:
    return None if v is None else v * 3600


def read_row(row: Any) -> PriceIncrease:
    """One pending row in $/h; GPU prices per GPU, as the market's (the engine scales them)."""
    if not isinstance(row, dict):
        raise MalformedAnswer("pending price increase: a row is not an object")
    others = tuple(k for k in OTHERS if _rate(row, f"new_{k}") is not None)
    return PriceIncrease(
        pending_id=_id(row, "pending_price_increase_id"),
        instance_id=_id(row, "contract_id"),
        old_gpu_dph=_hourly(_rate(row, "old_gpu_costpersec")),
        new_gpu_dph=_hourly(_rate(row, "new_gpu_costpersec")),
        old_storage_gb_h=_hourly(_rate(row, "old_disk_ram_costpersec")),
        new_storage_gb_h=_hourly(_rate(row, "new_disk_ram_costpersec")),
        takes_effect_at=_rate(row, "contract_end_date", "a time", math.inf),
        new_end=_rate(row, "ask_end_date", "a time", math.inf),
        others_changed=others,
    )


def read_pending(data: Any) -> list[PriceIncrease]:
    """The rows of an answer that can be read; an unreadable one costs that row only."""
    rows = data.get("pending_price_increases") if isinstance(data, dict) else None
    if rows is None and isinstance(data, dict) and data.get("success") is not False:
        return []  # "No pending price increases." (the CLI reads a missing list as none)
    if not isinstance(rows, list):
        raise MalformedAnswer("pending price increases answered without a list")
    out = []
    for row in rows:
        with contextlib.suppress(MalformedAnswer):
            out.append(read_row(row))
    return out


class PriceIncreases(Transport):
    """The price-increase calls `VastClient` inherits."""

    async def pending_price_increases(self) -> list[PriceIncrease]:
        return read_pending(await self._request("GET", PENDING_PATH, kind=KIND))

    async def answer_price_increase(self, pending_id: int, accept: bool) -> bool:
        verb = "accept" if accept else "reject"
        try:
            await self._request(
                "PUT",
                f"/api/v0/instances/{verb}-price-increase/",
                kind=KIND,
                body={"pending_price_increase_id": int(pending_id)},
            )
        except ApiError as exc:
            if exc.status == 409 or (exc.status == 404 and NO_PENDING in (exc.code + exc.msg)):
                return False
            raise
        return True
