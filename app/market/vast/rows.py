"""Vast.ai's offer and instance rows read into rentwatch's own `Offer` and `Instance`.

Every row is evidence, not truth (DESIGN rule 9): a number not finite or out of range makes the
row malformed; strings are stripped as the official SDK does. An `actual_status` the API does not
document reads as unknown, which is not fatal: Vast adds states (SkyPilot maps unknown ones to
"initialising"), so deadlines decide."""

from __future__ import annotations

import math
from typing import Any

from ...core.errors import MalformedAnswer
from ...core.models import Instance, Offer, SSHRoute

_MAX_TEXT = 4096


def _num(
    row: dict[str, Any],
    key: str,
    default: float | None = None,
    lo: float | None = None,
    hi: float | None = None,
) -> float | None:
    """A finite number in [lo, hi], the default when absent, MalformedAnswer otherwise."""
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
    if (lo is not None and out < lo) or (hi is not None and out > hi):
        raise MalformedAnswer(f"field {key!r} is out of range: {out!r}")
    return out


def _soft(
    row: dict[str, Any], key: str, lo: float | None = None, hi: float | None = None
) -> float | None:
    """A display number: out of range or not a number reads as None, and the row stays."""
    try:
        return _num(row, key, None, lo, hi)
    except MalformedAnswer:
        return None


def _int(row: dict[str, Any], key: str, required: bool = False) -> int | None:
    value = _num(row, key)
    if value is None:
        if required:
            raise MalformedAnswer(f"required field {key!r} is missing")
        return None
    if not value.is_integer() or abs(value) > 2**62:
        raise MalformedAnswer(f"field {key!r} is not an id: {value!r}")
    return int(value)


# a rental's intended, current and next state in rentwatch's words: Vast also says a stopped
# contract is `inactive` (dstack's `vastai/compute.py` reads it as stopped)
_STATE_WORDS = {"inactive": "stopped"}


def _state(row: dict[str, Any], key: str) -> str | None:
    said = _text(row, key)
    return _STATE_WORDS.get(said.lower(), said) if said else said


def _text(row: dict[str, Any], key: str) -> str | None:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, dict | list):
        raise MalformedAnswer(f"field {key!r} is a {type(value).__name__}, expected text")
    if not isinstance(value, str):
        value = str(value)
    return value.strip()[:_MAX_TEXT]


# Ranges a market number can take; outside them the row is malformed (a negative or
# non-finite price must never reach the budget arithmetic).
MAX_DPH = 1000.0  # $/h for one rental; the dearest real offers are far below
MAX_STORAGE_COST = 100.0  # $/GB/month
MAX_INET_COST = 100.0  # $/GB


def parse_offer(row: Any) -> Offer:
    """One offer row of a search answer; MalformedAnswer where it cannot be believed."""
    if not isinstance(row, dict):
        raise MalformedAnswer(f"an offer is a {type(row).__name__}, not an object")
    dph_total = _num(row, "dph_total", lo=0.0, hi=MAX_DPH)
    if dph_total is None:
        raise MalformedAnswer("offer without a usable dph_total")
    return Offer(
        id=_int(row, "id", required=True) or 0,
        machine_id=_int(row, "machine_id", required=True) or 0,
        host_id=_int(row, "host_id"),
        gpu_name=_text(row, "gpu_name") or "unknown",
        num_gpus=_int(row, "num_gpus") or 1,
        dph_total=dph_total,
        gpu_dph=_num(row, "dph_base", dph_total, lo=0.0, hi=MAX_DPH) or 0.0,
        storage_cost=_num(row, "storage_cost", 0.0, lo=0.0, hi=MAX_STORAGE_COST) or 0.0,
        cuda_max_good=_soft(row, "cuda_max_good", 0.0, 100.0),
        reliability=_soft(row, "reliability2", 0.0, 1.0)
        if row.get("reliability2") is not None
        else _soft(row, "reliability", 0.0, 1.0),
        driver_version=_text(row, "driver_version"),
        gpu_ram_mb=_soft(row, "gpu_ram", 0.0),
        geolocation=_text(row, "geolocation"),
        dlperf=_soft(row, "dlperf", 0.0),
        disk_bw=_soft(row, "disk_bw", 0.0),
        inet_down=_soft(row, "inet_down", 0.0),
        inet_up_cost=_num(row, "inet_up_cost", 0.0, lo=0.0, hi=MAX_INET_COST) or 0.0,
        inet_down_cost=_num(row, "inet_down_cost", 0.0, lo=0.0, hi=MAX_INET_COST) or 0.0,
        bid_floor=_soft(row, "min_bid", 0.0, MAX_DPH),
        direct_port_count=_count(row, "direct_port_count"),
    )


def ssh_routes(row: dict[str, Any]) -> tuple[SSHRoute, ...]:
    """The instance's SSH routes, direct first (it skips the relay, which drops sessions), as
    SkyPilot's `sky/provision/vast/instance.py` and the official CLI's `ssh-url` read them."""
    routes: list[SSHRoute] = []
    ports = row.get("ports")
    if isinstance(ports, dict):
        mapped = ports.get("22/tcp")
        if isinstance(mapped, list) and mapped and isinstance(mapped[0], dict):
            host_port = mapped[0].get("HostPort")
            if isinstance(host_port, str | int) and not isinstance(host_port, bool):
                text = str(host_port).strip()
                if text.isdigit() and 0 < int(text) < 65536:
                    routes.append(SSHRoute("direct", _text(row, "public_ipaddr"), int(text)))
    proxy_port = _int(row, "ssh_port")
    if proxy_port is not None and 0 < proxy_port < 65536:
        routes.append(SSHRoute("proxy", _text(row, "ssh_host"), proxy_port))
    return tuple(routes)


def parse_instance(row: Any) -> Instance:
    """One instance row of a list or show answer; MalformedAnswer where it cannot be believed."""
    if not isinstance(row, dict):
        raise MalformedAnswer(f"an instance is a {type(row).__name__}, not an object")
    routes = ssh_routes(row)
    best = routes[0] if routes else None
    dph_total = _num(row, "dph_total", 0.0, lo=0.0, hi=MAX_DPH) or 0.0
    status = row.get("actual_status")
    if status is not None and not isinstance(status, str):
        raise MalformedAnswer(f"actual_status has type {type(status).__name__}")
    return Instance(
        id=_int(row, "id", required=True) or 0,
        machine_id=_int(row, "machine_id"),
        host_id=_int(row, "host_id"),
        label=_text(row, "label"),
        status=_text(row, "actual_status") or None,
        target_state=_state(row, "intended_status"),
        status_msg=_text(row, "status_msg"),
        start_date=_num(row, "start_date", lo=0.0),
        gpu_name=_text(row, "gpu_name"),
        num_gpus=_int(row, "num_gpus") or 1,
        gpu_dph=_num(row, "dph_base", dph_total, lo=0.0, hi=MAX_DPH) or 0.0,
        dph_total=dph_total,
        storage_total_cost=_num(row, "storage_total_cost", 0.0, lo=0.0, hi=MAX_DPH) or 0.0,
        gpu_util=_soft(row, "gpu_util", 0.0, 100.0),
        ssh_host=best.host if best else None,
        ssh_port=best.port if best else None,
        image=_text(row, "image_uuid"),
        current_state=_state(row, "cur_state"),
        next_state=_state(row, "next_state"),
        ssh_routes=routes,
        uptime_mins=_soft(row, "uptime_mins", 0.0),
        bid_floor=_soft(row, "min_bid", 0.0, MAX_DPH),
        end_date=_soft(row, "end_date", 0.0),
        interruptible=row["is_bid"] if isinstance(row.get("is_bid"), bool) else None,
    )


def _count(row: dict[str, Any], key: str) -> int | None:
    """A count the market shows (no decision fails on it): None when absent or not one."""
    value = _soft(row, key, 0.0, 1e6)
    return None if value is None else int(value)
