"""One ledger event as the named reads return it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
