"""What the account sees of its instances: the v1 list (pages of at most 25, its filters and
cursor), one instance's row, and the row itself (`instance_json`). Each handler takes the market
and the call."""

from __future__ import annotations

import base64
import bisect
import json
from typing import Any

from aiohttp import web

from .answers import MARKET_NOW, answer, error, page_of, query_of, sort_key
from .machines import vram_mb
from .market import SimMarket
from .query_match import matches
from .rental import SimInstance

MAX_PAGE = 25  # the list endpoint's documented maximum (VAST_API.md)


def _offline_filter(filters: Any) -> bool:
    """Does a list filter ask for `offline` (the field, or the status among its values)?"""
    if not isinstance(filters, dict):
        return False
    if "offline" in filters:
        return True
    cond = filters.get("actual_status")
    if not isinstance(cond, dict):
        return False
    values = [v for want in cond.values() for v in (want if isinstance(want, list) else [want])]
    return "offline" in values


async def list_page(market: SimMarket, request: web.Request) -> web.Response:
    return list_v1(market, query_of(request), MARKET_NOW.get())


async def show(market: SimMarket, request: web.Request) -> web.Response:
    inst = market.live(int(request.match_info["iid"]))
    now = MARKET_NOW.get()
    return answer({"instances": instance_json(market, inst, now) if inst else None})


async def filters(market: SimMarket, request: web.Request) -> web.Response:
    now = MARKET_NOW.get()
    rows = [instance_json(market, i, now) for i in _visible_by_id(market)]
    states = sorted({str(r["actual_status"]) for r in rows})
    return answer({"filters": [{"col": "actual_status", "values": states}]})


async def list_v0(market: SimMarket, request: web.Request) -> web.Response:
    """The v0 list is superseded by v1 (vast-ai/docs openapi.yaml marks it deprecated:
    "Please migrate to v1"); the market answers it with that, in its error shape."""
    return error(
        410,
        "deprecated_endpoint",
        "GET /api/v0/instances/ has been superseded by /api/v1/instances/ "
        "(keyset pagination): please migrate to v1",
    )


def _visible_by_id(market: SimMarket) -> list[SimInstance]:
    """Live instances in id order, without a sort (creation order is id order)."""
    every = market.instances
    return [every[i] for i in market.order if every[i].destroyed_at is None]


def list_v1(market: SimMarket, query: dict[str, str], now: float | None = None) -> web.Response:
    """`now`: the market moment the call arrived at, stamped on its answer (`X-Market-Time`):
    every row is as of that one moment, as one answer of the real service is."""
    now = market.clock.now() if now is None else now
    filters = json.loads(query.get("select_filters") or "{}")
    if _offline_filter(filters):
        # `offline` is computed from the heartbeat, not stored (vast-ai/docs
        # cli/reference/show-instance.mdx): no column to filter it by
        return error(
            400, "invalid_args", "actual_status 'offline' is computed, not stored: not a filter"
        )
    order_by = json.loads(query.get("order_by") or '[{"col": "id", "dir": "asc"}]')
    limit = max(1, min(int(query.get("limit") or MAX_PAGE), MAX_PAGE))
    if filters in ({}, None) and order_by == [{"col": "id", "dir": "asc"}]:
        return _list_by_id(market, query.get("after_token"), limit, now)
    visible = _visible_by_id(market)
    wanted = filters.get("label") if isinstance(filters, dict) else None
    if isinstance(wanted, dict) and set(wanted) == {"in"} and isinstance(wanted["in"], list):
        # by label (the poll plan's hot list): pick before rendering, so the call costs
        # the rows it returns, not the whole account
        labels = {v for v in wanted["in"] if v is None or isinstance(v, str)}
        visible = [i for i in visible if i.label in labels]
    states = filters.get("actual_status") if isinstance(filters, dict) else None
    if isinstance(states, dict) and set(states) == {"in"} and isinstance(states["in"], list):
        visible = [i for i in visible if i.status(now)[0] in states["in"]]
    rows = [instance_json(market, i, now) for i in visible]
    if isinstance(filters, dict):
        rows = [r for r in rows if matches(r, filters)]
    for spec in reversed(order_by if isinstance(order_by, list) else []):
        if isinstance(spec, dict) and "col" in spec:
            col = spec["col"]
            rows.sort(
                key=sort_key(str(col)),
                reverse=str(spec.get("dir", "asc")).lower() == "desc",
            )
    page, next_token = page_of(rows, query.get("after_token"), limit)
    return _listed(page, next_token, len(rows))


def _list_by_id(market: SimMarket, token: str | None, limit: int, now: float) -> web.Response:
    """The common list (no filter, by id): a cursor after the last id sent, so a full list costs
    O(n) however many pages (ids only grow)."""
    after = 0
    if token:
        try:
            text = base64.urlsafe_b64decode(token.encode()).decode()
            after = int(text.removeprefix("id:")) if text.startswith("id:") else -1
        except (ValueError, UnicodeDecodeError):
            after = -1
        if after < 0:
            return error(400, "invalid_args", "bad after_token")
    order = market.order
    page: list[SimInstance] = []
    more = False
    for iid in order[bisect.bisect_right(order, after) :]:
        inst = market.instances[iid]
        if inst.destroyed_at is not None:
            continue
        if len(page) == limit:
            more = True
            break
        page.append(inst)
    next_token = (
        base64.urlsafe_b64encode(f"id:{page[-1].id}".encode()).decode() if more and page else None
    )
    return _listed([instance_json(market, i, now) for i in page], next_token, market.live_count())


def _listed(rows: list[dict[str, Any]], next_token: str | None, total: int) -> web.Response:
    """One page of the v1 list, as the market answers it."""
    return answer(
        {
            "instances": rows,
            "next_token": next_token,
            "total_instances": total,
            "label_counts": {},
            "success": True,
        }
    )


def instance_json(market: SimMarket, inst: SimInstance, now: float | None = None) -> dict[str, Any]:
    now = market.clock.now() if now is None else now
    m = inst.machine
    actual, msg = inst.status(now)
    running = actual == "running"
    seg = inst.segments[-1]
    uptime = (now - seg.running_at) / 60 if running and seg.running_at else None
    gpu = market.gpu_state(inst, now) if running else None
    intended = inst.intended
    port = inst.ssh_port if running else None  # the proxy route
    direct = inst.direct_port if running and m.direct else None
    return {
        "id": inst.id,
        "machine_id": m.id,
        "host_id": m.host_id,
        "label": inst.label,
        "image_uuid": inst.image,
        "image_runtype": "ssh",
        "actual_status": actual,
        "intended_status": intended,
        "cur_state": "running" if intended in ("running", "frozen") else "stopped",
        "next_state": intended,
        "status_msg": msg,
        "start_date": inst.created_at,
        "extra_env": [[k, v] for k, v in inst.env.items()],
        "onstart": inst.onstart,
        "dph_base": inst.gpu_dph,  # a bid rental's: its bid
        "is_bid": inst.bid is not None,  # the rental's type (docs/fidelity.md)
        "dph_total": round(inst.gpu_dph + inst.storage_dph, 6),
        "storage_total_cost": round(inst.storage_dph, 6),
        "storage_cost": m.storage_cost,
        "disk_space": inst.disk_gb,
        "gpu_name": m.advertised_gpu,
        "num_gpus": m.num_gpus,
        "gpu_ram": vram_mb(m.advertised_gpu),
        "gpu_util": gpu["util"] if gpu else None,
        "gpu_temp": gpu["temp"] if gpu else None,
        "vmem_usage": 0.4 if running else None,
        "driver_version": m.driver_version,
        "cuda_max_good": m.cuda_max_good,
        "reliability2": m.reliability,
        "verification": m.verification,
        "cpu_cores_effective": 8.0,
        "cpu_ram": 32000,
        "cpu_util": 3.0 if running else None,
        "inet_up": m.inet_up,
        "inet_down": m.inet_down,
        "geolocation": m.geolocation,
        # the proxy route, and the direct one only where the host has it: never one address
        # with the other's port
        "ssh_host": m.proxy_addr if port else None,
        "ssh_port": port,
        "ssh_idx": m.proxy_addr.rsplit(".", 1)[-1] if port else None,
        "public_ipaddr": m.direct_addr,
        "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(direct)}]}
        if direct
        else ({} if running else None),
        "direct_port_count": 20 if m.direct else 0,
        "uptime_mins": round(uptime, 2) if uptime is not None else None,
        "min_bid": market.min_bid(m, now),  # the bid to beat now (app/sim/bids)
        "end_date": m.contract_end,
        "template_id": None,
        "template_hash_id": None,
    }
