"""Typed views of the marketplace's offers and instances, parsed defensively from its JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import MalformedAnswer

# actual_status values the API documents; anything else is kept but treated as unknown.
KNOWN_STATUSES = frozenset(
    {
        "created",
        "loading",
        "running",
        "stopped",
        "frozen",
        "exited",
        "rebooting",
        "unknown",
        "offline",
    }
)
TERMINAL_BOOT_STATUSES = frozenset({"exited", "unknown", "offline"})

_MAX_TEXT = 4096


def _num(row: dict[str, Any], key: str, default: float | None = None) -> float | None:
    value = row.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value)
        except ValueError:
            raise MalformedAnswer(f"field {key!r} is not a number: {value[:40]!r}") from None
    else:
        raise MalformedAnswer(f"field {key!r} has type {type(value).__name__}, expected a number")
    if not math.isfinite(out):
        raise MalformedAnswer(f"field {key!r} is not finite: {value!r}")
    return out


def _int(row: dict[str, Any], key: str, required: bool = False) -> int | None:
    value = _num(row, key)
    if value is None:
        if required:
            raise MalformedAnswer(f"required field {key!r} is missing")
        return None
    if not value.is_integer() or abs(value) > 2**62:
        raise MalformedAnswer(f"field {key!r} is not an id: {value!r}")
    return int(value)


def _text(row: dict[str, Any], key: str) -> str | None:
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        value = str(value)
    return value[:_MAX_TEXT]


@dataclass(frozen=True, slots=True)
class Offer:
    id: int
    machine_id: int
    host_id: int | None
    gpu_name: str
    num_gpus: int
    dph_total: float
    dph_base: float
    storage_cost: float  # $/GB/month
    cuda_max_good: float | None
    reliability: float | None
    driver_version: str | None
    gpu_ram_mb: float | None
    geolocation: str | None
    dlperf: float | None = None

    @classmethod
    def from_api(cls, row: Any) -> Offer:
        if not isinstance(row, dict):
            raise MalformedAnswer(f"an offer is a {type(row).__name__}, not an object")
        dph_total = _num(row, "dph_total")
        if dph_total is None or dph_total < 0:
            raise MalformedAnswer("offer without a usable dph_total")
        return cls(
            id=_int(row, "id", required=True) or 0,
            machine_id=_int(row, "machine_id", required=True) or 0,
            host_id=_int(row, "host_id"),
            gpu_name=_text(row, "gpu_name") or "unknown",
            num_gpus=_int(row, "num_gpus") or 1,
            dph_total=dph_total,
            dph_base=_num(row, "dph_base", dph_total) or 0.0,
            storage_cost=_num(row, "storage_cost", 0.0) or 0.0,
            cuda_max_good=_num(row, "cuda_max_good"),
            reliability=_num(row, "reliability2", _num(row, "reliability")),
            driver_version=_text(row, "driver_version"),
            gpu_ram_mb=_num(row, "gpu_ram"),
            geolocation=_text(row, "geolocation"),
            dlperf=_num(row, "dlperf"),
        )


@dataclass(frozen=True, slots=True)
class Instance:
    id: int
    machine_id: int | None
    host_id: int | None
    label: str | None
    actual_status: str | None  # None while provisioning
    intended_status: str | None
    status_msg: str | None
    start_date: float | None
    gpu_name: str | None
    num_gpus: int
    dph_base: float
    dph_total: float
    storage_total_cost: float  # $/h for the disk
    disk_space: float | None
    gpu_util: float | None
    ssh_host: str | None
    ssh_port: int | None
    image: str | None

    @property
    def known_status(self) -> str | None:
        s = self.actual_status
        return s if s is None or s in KNOWN_STATUSES else "unknown"

    @classmethod
    def from_api(cls, row: Any) -> Instance:
        if not isinstance(row, dict):
            raise MalformedAnswer(f"an instance is a {type(row).__name__}, not an object")
        ssh_port = _int(row, "ssh_port")
        ports = row.get("ports")
        if isinstance(ports, dict):
            mapped = ports.get("22/tcp")
            if isinstance(mapped, list) and mapped and isinstance(mapped[0], dict):
                host_port = mapped[0].get("HostPort")
                if isinstance(host_port, str | int) and str(host_port).isdigit():
                    ssh_port = int(host_port)
        dph_total = _num(row, "dph_total", 0.0) or 0.0
        return cls(
            id=_int(row, "id", required=True) or 0,
            machine_id=_int(row, "machine_id"),
            host_id=_int(row, "host_id"),
            label=_text(row, "label"),
            actual_status=_text(row, "actual_status"),
            intended_status=_text(row, "intended_status"),
            status_msg=_text(row, "status_msg"),
            start_date=_num(row, "start_date"),
            gpu_name=_text(row, "gpu_name"),
            num_gpus=_int(row, "num_gpus") or 1,
            dph_base=_num(row, "dph_base", dph_total) or 0.0,
            dph_total=dph_total,
            storage_total_cost=_num(row, "storage_total_cost", 0.0) or 0.0,
            disk_space=_num(row, "disk_space"),
            gpu_util=_num(row, "gpu_util"),
            ssh_host=_text(row, "ssh_host") or _text(row, "public_ipaddr"),
            ssh_port=ssh_port,
            image=_text(row, "image_uuid"),
        )
