"""What the account does to instances: rent an offer (`PUT /api/v0/asks/{id}/`), start, stop or
label one (`PUT /api/v0/instances/{id}/`), change its bid, copy between two, destroy it, attach
an SSH key to it, and ask for its logs. Each handler takes the market and the call."""

from __future__ import annotations

import json
import secrets
from typing import Any

from aiohttp import web

from .answers import Refused, answer, body_json, call_now, error, live, text
from .copies import Copy, cancel_into, container_id
from .market import SimMarket


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
    env = body.get("env") or {}
    if not isinstance(env, dict):
        env = {}
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
        Copy(src.id, body["src_path"], dst.id, body["dst_path"], market.clock.now())
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
        market.stop(inst, at=now)
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
    inst = live(market, request)
    key = str((await body_json(request)).get("ssh_key", "")).strip()
    if not key.startswith(("ssh-", "ecdsa-")):
        return error(400, "invalid_args", "not an OpenSSH public key")
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
        self.base_url = ""  # where the results are served (set once the server listens)
        self.results: dict[str, str] = {}

    async def ask(self, market: SimMarket, request: web.Request) -> web.Response:
        body = await body_json(request)
        inst = live(market, request)
        tail = 1000
        if isinstance(body, dict) and body.get("tail"):
            tail = max(1, int(body["tail"]))
        now = market.clock.now()
        lines = []
        for seg in inst.segments:
            for step in seg.steps:
                if step.at <= now and step.msg and (seg.end is None or step.at < seg.end):
                    lines.append(step.msg)
        token = secrets.token_hex(12)
        self.results[token] = "\n".join(lines[-tail:]) + "\n"
        return answer(
            {
                "success": True,
                "result_url": f"{self.base_url}/sim/v0/logs/{token}",
                "msg": "Logs are being prepared",
            }
        )

    async def result(self, market: SimMarket, request: web.Request) -> web.Response:
        body = self.results.get(request.match_info["token"])
        return text(body) if body is not None else text("not found", 404)
