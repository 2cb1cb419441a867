"""The account's instances: the v1 list and one instance's row, and what the account does to
them (rent, start, stop, freeze, label, bid, copy, destroy, attach a key, ask for logs)."""

from __future__ import annotations

import bisect
import itertools
import json
import secrets
from typing import Any

from aiohttp import web

from .answers import (
    SCOPED,
    Refused,
    answer,
    body_json,
    call_now,
    error,
    live,
    ordered,
    page_of,
    public_key,
    query_of,
    text,
    token_at,
    token_of,
)
from .copies import Copy, cancel_into, container_id
from .market import SimMarket
from .query_match import matches
from .rental import SimInstance

MAX_PAGE = 25  # the list endpoint's documented maximum (VAST_API.md)


def _offline_filter(filters: Any) -> bool:
    """Does a list filter ask for `offline` (the field, or the status among its values)?"""
    cond = filters.get("actual_status") if isinstance(filters, dict) else None
    wants = cond.values() if isinstance(cond, dict) else ()
    values = [v for want in wants for v in (want if isinstance(want, list) else [want])]
    return isinstance(filters, dict) and "offline" in filters or "offline" in values


async def list_page(market: SimMarket, request: web.Request) -> web.Response:
    return list_v1(market, query_of(request), call_now(market.clock))


async def show(market: SimMarket, request: web.Request) -> web.Response:
    inst = market.live(int(request.match_info["iid"]))
    now = call_now(market.clock)
    return answer({"instances": instance_json(market, inst, now) if inst else None})


async def filters(market: SimMarket, request: web.Request) -> web.Response:
    now = call_now(market.clock)
    states = sorted({str(i.status(now)[0]) for i in _visible_by_id(market)})
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
    every = market.instances
    return [every[i] for i in market.order if every[i].destroyed_at is None]


def list_v1(market: SimMarket, query: dict[str, str], now: float) -> web.Response:
    """Every row as of `now`, the one moment the call arrived at, as one answer of the real
    service is."""
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
    specs = order_by if isinstance(order_by, list) else []
    by = [(s["col"], s.get("dir", "asc")) for s in specs if isinstance(s, dict) and "col" in s]
    rows = ordered(rows, by)
    page, next_token = page_of(rows, query.get("after_token"), limit)
    return _listed(page, next_token, len(rows))


def _list_by_id(market: SimMarket, token: str | None, limit: int, now: float) -> web.Response:
    """The common list (no filter, by id): a cursor after the last id sent, so a full list costs
    O(n) however many pages (ids only grow)."""
    order = market.order
    after = (market.instances[i] for i in order[bisect.bisect_right(order, token_at(token)) :])
    page = list(itertools.islice((i for i in after if i.destroyed_at is None), limit + 1))
    next_token = token_of(page[limit - 1].id) if len(page) > limit else None
    rows = [instance_json(market, i, now) for i in page[:limit]]
    return _listed(rows, next_token, market.live_count())


def _listed(rows: list[dict[str, Any]], next_token: str | None, total: int) -> web.Response:
    return answer(
        {
            "instances": rows,
            "next_token": next_token,
            "total_instances": total,
            "label_counts": {},
            "success": True,
        }
    )


def instance_json(market: SimMarket, inst: SimInstance, now: float) -> dict[str, Any]:
    m = inst.machine
    actual, msg = inst.status(now)
    running = actual == "running"
    seg = inst.segments[-1]
    uptime = (now - seg.running_at) / 60 if running and seg.running_at else None
    gpu = market.gpu_state(inst, now) if running else None
    intended = inst.intended
    port = inst.ssh_port if running else None  # the proxy route
    direct = inst.direct_port if running and m.direct else None
    return m.facts() | {
        "id": inst.id,
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
        "disk_space": inst.disk_gb,
        "gpu_util": gpu["util"] if gpu else None,
        "gpu_temp": gpu["temp"] if gpu else None,
        "vmem_usage": 0.4 if running else None,
        "cpu_util": 3.0 if running else None,
        # the proxy route, and the direct one only where the host has it: never one address
        # with the other's port
        "ssh_host": m.proxy_addr if port else None,
        "ssh_port": port,
        "ssh_idx": m.proxy_addr.rsplit(".", 1)[-1] if port else None,
        "public_ipaddr": m.direct_addr,
        "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(direct)}]}
        if direct
        else ({} if running else None),
        "uptime_mins": round(uptime, 2) if uptime is not None else None,
        "min_bid": market.min_bid(m, now),  # the bid to beat now (app/sim/bids)
        "template_id": None,
        "template_hash_id": None,
    }


def no_such_ask(offer_id: int) -> web.Response:
    """An offer no longer there (another renter took it), as Vast answers it (vast-ai/docs
    `api-reference/openapi.yaml`, createInstance 404): the `no_such_ask` token is in `msg`."""
    said = f"error 404/3603: no_such_ask Instance type by id {offer_id} is not available."
    return error(404, "invalid_args", said, ask_id=offer_id)


BID_CAP_PER_GPU = 32.0  # "Bid price must be >= 0.001 and <= 32.0 * number of GPUs"


def check_bid(price: Any, num_gpus: int) -> None:
    """A bid outside the OpenAPI's range is refused. The price is the machine's, so its cap grows
    with its GPUs (`change_bid.yaml`: "<= 32.0 * number of GPUs"). The text over the cap is ours:
    no source gives Vast's."""
    if isinstance(price, bool) or not isinstance(price, int | float) or not price >= 0.001:
        raise Refused(error(400, "invalid_args", "Please set a bid price >= 0.001."))
    cap = BID_CAP_PER_GPU * num_gpus
    if price > cap:
        said = f"Please set a bid price <= {cap:g} (32.0 x {num_gpus} GPUs)."
        raise Refused(error(400, "invalid_args", said))


async def rent(market: SimMarket, request: web.Request) -> web.Response:
    offer_id, body = int(request.match_info["ask"]), await body_json(request)
    if not isinstance(body, dict):
        return error(400, "invalid_args", "body must be an object")
    now = call_now(market.clock)
    m = market.rentable(offer_id, now)
    if m is None or market.taken_meanwhile(m, now):
        return no_such_ask(offer_id)
    image = body.get("image")
    if not isinstance(image, str) or not image:
        return error(400, "invalid_args", "image is required")
    disk = float(body.get("disk") or 10)
    if not 1 <= disk <= 2000:
        return error(400, "invalid_args", "disk must be between 1 and 2000 GB")
    env = body["env"] if isinstance(body.get("env"), dict) else {}
    label = body.get("label")
    price = body.get("price")  # a bid: the interruptible tier (absent or null: on-demand)
    if price is not None:
        check_bid(price, m.num_gpus)
    if price is not None and body.get("cancel_unavail") and market.min_bid(m, now) > price:
        # "when cancel_unavail is true and instance cannot start" (openapi.yaml, 410)
        said = f"error 410/3907: no_such_ask Instance type {offer_id} is no longer available."
        return error(410, "no_such_ask", said, ask_id=offer_id)
    inst = market.create(
        offer_id,
        image,
        disk,
        str(label) if label else None,
        {str(k): str(v) for k, v in env.items()},
        body.get("onstart"),
        at=now,
        price=None if price is None else float(price),
    )
    if inst.paused_at is not None and inst.bid is not None:
        # "Vast.ai creates spot instances in the stopped state and returns an error if the
        # bid is insufficient" (dstack `vastai/api_client.py`): the error still names the
        # instance. `invalid_price` is a create error of the OpenAPI; the text is ours.
        low = market.min_bid(m, now)
        said = f"bid ${inst.bid:.4f}/h is under the machine's min_bid ${low:.4f}/h: "
        said += f"instance {inst.id} created stopped"
        ids = {"new_contract": inst.id, "instance_api_key": inst.api_key}
        return error(400, "invalid_price", said, **ids)
    return answer({"success": True, "new_contract": inst.id, "instance_api_key": inst.api_key})


async def bid_price(market: SimMarket, request: web.Request) -> web.Response:
    """`PUT /api/v0/instances/bid_price/{id}/` with `{"client_id": "me", "price": p}`
    (vast-ai/docs openapi.yaml, change bid). A null price bids "a winning bid price" (the
    CLI's `change bid` without `--price`): the machine's `min_bid` now."""
    body = await body_json(request)
    inst = live(market, request, "Instance with that ID does not exist.")
    if not isinstance(body, dict):
        return error(400, "invalid_args", "Please set a bid price >= 0.001.")
    price, now = body.get("price"), call_now(market.clock)
    if price is None:
        price = market.min_bid(inst.machine, now)
    check_bid(price, inst.machine.num_gpus)
    if inst.bid is None:
        # "The rental type cannot be changed after the create": an on-demand rental
        # takes no bid (the simulator's words: no source gives Vast's)
        return error(400, "invalid_args", "instance is not interruptible: no bid to change")
    market.change_bid(inst, float(price), at=now)
    return answer({"success": True})


async def copy_direct(market: SimMarket, request: web.Request) -> web.Response:
    """`PUT /api/v0/commands/copy_direct/` (vast-ai/docs `copy.yaml`; the CLI's `copy`):
    answered at once, the data lands later (sim/copies.py). A stopped source is fine; one
    whose host has no open port is not."""
    body = await body_json(request)
    if not isinstance(body, dict):
        return error(400, "invalid_args", "Invalid src_path.")
    for key in ("src_path", "dst_path"):
        path = body.get(key)
        if not isinstance(path, str) or not path or "\0" in path:
            return error(400, "invalid_args", f"Invalid {key}.")
    ids = []
    for key in ("src_id", "dst_id"):
        iid = container_id(body.get(key))
        if iid is None:
            return error(400, "invalid_args", f"Invalid {key}.")
        ids.append(iid)
    src, dst = (market.live(i) for i in ids)
    if src is None or dst is None:
        # the OpenAPI's 404 for "Source or destination ID not found or access denied"
        return error(404, "no_such_user", "No such user.")
    if not src.machine.direct:
        # the copy runs over SSH between the hosts (data-movement.mdx: copies "use ssh
        # authentication"); a host without open ports (`direct_port_count` 0) takes none
        return error(400, "invalid_args", "Remote instance does not have an open port")
    market.copies.append(
        Copy(src.id, body["src_path"], dst.id, body["dst_path"], call_now(market.clock))
    )
    return answer(
        {
            "success": True,
            "msg": "Remote to Remote copy initiated - check instance status bar for "
            "progress updates (~30 seconds delayed).",
        }
    )


async def cancel_copy(market: SimMarket, request: web.Request) -> web.Response:
    """`DELETE /api/v0/commands/copy_direct/` with `{"client_id": "me", "dst_id"}`: every copy
    into `dst_id` not landed yet ends. The 400s are the OpenAPI file's
    (`auto_delete_api_v0_commands_copy_direct_6443b6.yaml`)."""
    body = await body_json(request)
    dst_id = container_id(body.get("dst_id")) if isinstance(body, dict) else None
    if dst_id is None:
        return error(400, "invalid_args", "Invalid dst_id.")
    if market.live(dst_id) is None:
        return error(400, "invalid_args", "Remote instance does not have an open port")
    cancel_into(market.copies, dst_id)
    return answer({"success": True})


async def manage(market: SimMarket, request: web.Request) -> web.Response:
    body = await body_json(request)
    inst = live(market, request)
    if not isinstance(body, dict):
        return error(400, "invalid_args", "body must be an object")
    if "label" in body:
        inst.label = None if body["label"] is None else str(body["label"])[:256]
    state, now = body.get("state"), call_now(market.clock)
    if state == "stopped":
        inst.frozen_at = None
        inst.paused_at = None  # a stop the renter asked for does not resume by itself
        market.stop(inst, at=now, inside=request.get(SCOPED) == inst.id)
    elif state == "frozen":  # paused, memory kept: only a running container can be
        if not inst.running(now):
            return error(400, "invalid_args", "only a running instance can be frozen")
        inst.frozen_at = now
    elif state == "running" and inst.frozen_at is not None:
        inst.frozen_at = None  # resumed where it was
    elif state == "running":
        if market.contract_over(inst, now):
            return error(400, "invalid_args", "the host's rental contract has ended")
        market.start(inst, at=now)
    elif state is not None:
        return error(400, "invalid_args", f"unknown state {state!r}")
    elif "label" not in body:
        return error(400, "invalid_args", "nothing to update")
    return answer({"success": True})


async def delete(market: SimMarket, request: web.Request) -> web.Response:
    market.destroy(live(market, request), at=call_now(market.clock))
    return answer({"success": True})


async def attach_key(market: SimMarket, request: web.Request) -> web.Response:
    """`POST /api/v0/instances/{id}/ssh/`: the key reaches this instance only (attachSshKey)."""
    inst, key = live(market, request), await public_key(request)
    if key not in inst.ssh_keys:
        inst.ssh_keys.append(key)
    return answer({"success": True, "msg": "SSH key attached successfully"})


async def instance_keys(market: SimMarket, request: web.Request) -> web.Response:
    """`GET /api/v0/instances/{id}/ssh/`: `ssh_keys` is a JSON *string* of the key objects
    (openapi.yaml showSshKeys), decoded a second time by the caller."""
    keys = [
        {"id": n + 1, "name": f"key-{n + 1}", "public_key": k}
        for n, k in enumerate(live(market, request).ssh_keys)
    ]
    return answer({"success": True, "ssh_keys": json.dumps(keys)})


class Logs:
    """An instance's status lines so far (`PUT /api/v0/instances/request_logs/{id}/`), kept at a
    result URL of the simulator's own (`/sim/v0/logs/{token}`), as Vast hands out one."""

    def __init__(self) -> None:
        self.results: dict[str, str] = {}

    async def ask(self, market: SimMarket, request: web.Request) -> web.Response:
        body = await body_json(request)
        inst = live(market, request)
        tail = max(1, int(body["tail"])) if isinstance(body, dict) and body.get("tail") else 1000
        now = call_now(market.clock)
        lines = [
            step.msg
            for seg in inst.segments
            for step in seg.steps
            if step.at <= now and step.msg and (seg.end is None or step.at < seg.end)
        ]
        token = secrets.token_hex(12)
        self.results[token] = "\n".join(lines[-tail:]) + "\n"
        return answer(
            {
                "success": True,
                "result_url": str(request.url.with_path(f"/sim/v0/logs/{token}")),
                "msg": "Logs are being prepared",
            }
        )

    async def result(self, market: SimMarket, request: web.Request) -> web.Response:
        body = self.results.get(request.match_info["token"])
        return text(body) if body is not None else text("not found", 404)
