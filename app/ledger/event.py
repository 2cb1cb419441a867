"""One ledger event as the named reads return it, and the columns of an event in the order the
`events` table and every row of it carry them (the ledger's writer and the team store's hash chain
read the same list)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EVENT_COLUMNS = (
    "seq",
    "ts",
    "wall",
    "campaign",
    "instance_id",
    "machine_id",
    "host_id",
    "offer_id",
    "gpu_name",
    "gpu_dph",
    "storage_dph",
    "actor",
    "kind",
    "phase",
    "ok",
    "reason",
    "detail",
    "intent_seq",
)


@dataclass(frozen=True)
class Event:
    seq: int
    at: float
    kind: str
    actor: str
    phase: str
    ok: bool | None
    reason: str
    campaign: str | None = None
    instance_id: int | None = None
    machine_id: int | None = None
    host_id: int | None = None
    offer_id: int | None = None
    gpu_name: str | None = None
    gpu_dph: float | None = None
    storage_dph: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    intent_seq: int | None = None
    wall: float | None = None
