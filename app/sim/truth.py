"""One rental's row of the market's truth (`SimMarket.truth`): what the renter's API never says in
full. The referee scores a run against these rows, never against the engine's own ledger."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.billing import Charges
from .rental import SimInstance
from .scenario import DELIVERING


def running(row: Mapping[str, Any]) -> bool:
    return row.get("actual_status") == "running"


def truth_row(inst: SimInstance, now: float, c: Charges) -> dict[str, Any]:
    running_at = next(
        (s.running_at for s in inst.segments if s.running_at is not None and s.running_at <= now),
        None,
    )
    actual, _ = inst.status(now)
    dropped = [
        s.offline_at for s in inst.segments if s.offline_at is not None and s.offline_at <= now
    ]
    return {
        "id": inst.id,
        "machine_id": inst.machine.id,
        "host_id": inst.machine.host_id,
        "offer_id": inst.offer_id if inst.offer_id is not None else inst.machine.offer_id,
        "behaviour": inst.machine.behaviour,
        "delivering": inst.machine.behaviour in DELIVERING,
        "gpu_name": inst.machine.advertised_gpu,
        "real_gpu": inst.machine.real_gpu,
        "actual_status": actual,
        "created_at": inst.created_at,
        "running_at": running_at,
        "stopped_at": inst.stops[-1] if inst.stops and inst.intended == "stopped" else None,
        "destroyed_at": inst.destroyed_at,
        "offline_at": dropped[0] if dropped else None,  # the host went dark
        "gpu_dph": inst.gpu_dph,
        "storage_dph": inst.storage_dph,
        "gpu_usd": round(c.gpu_usd, 6),
        "storage_usd": round(c.storage_usd, 6),
        "bandwidth_usd": round(c.bandwidth_usd, 6),
        "total_usd": round(c.total_usd, 6),
        "direct_ssh": inst.machine.direct,
        "market_stopped_at": inst.market_stop_at,
        "expired_at": inst.expired_at,
        # the interruptible tier: the bid in force (None: on-demand), each outbid and each
        # resume the market made by itself
        "bid": inst.bid,
        "outbid_at": list(inst.outbids),
        # held stopped from a create (or a start) whose bid did not win: the market's pause too
        "bid_lost_at": list(inst.lost_bids),
        "resumed_at": list(inst.resumes),
    }
