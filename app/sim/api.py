"""The marketplace's REST surface (the Vast.ai subset in VAST_API.md) over the market model.

As unkind as the real one: list pages of at most 25 rows, a minimum interval per call kind
enforced as 429 `API requests too frequent` (with a small burst allowance, as Vast's
max-calls-per-period limits allow), the market's own charges at `GET /api/v0/charges/`.
"""

from __future__ import annotations

import base64
import bisect
import json
import random
import re
import secrets
from typing import Any

from ..core.offer_query import matches
from .http import Request, Response
from .market import SimMarket
from .rental import SimInstance

_INSTANCE = re.compile(r"^/api/v0/instances/(\d+)/?$")
_ASK = re.compile(r"^/api/v0/asks/(\d+)/?$")
_LOGS = re.compile(r"^/api/v0/instances/request_logs/(\d+)/?$")
_ATTACH = re.compile(r"^/api/v0/instances/(\d+)/ssh/?$")
_RESULT = re.compile(r"^/sim/v0/logs/([0-9a-f]+)$")
MAX_PAGE = 25  # the list endpoint's documented maximum (VAST_API.md)
# minimum market seconds between calls of a kind (the client's DEFAULT_MIN_INTERVALS), and the
# burst a kind may spend before the interval applies
PACING = {"list": 1.0, "show": 1.0, "manage": 1.0, "create": 4.5, "destroy": 3.0, "search": 6.0}
BURST = 5
DAY = 86400.0

RATE_LIMIT_BODIES = (
    Response.text("API requests too frequent", 429),
    Response.of({"detail": "Request was throttled."}, 429),
    Response.of({"success": False, "error": "rate_limit_exceeded", "msg": "slow down"}, 429),
)


def _sort_key(col: str) -> Any:
    def key(row: dict[str, Any]) -> tuple[bool, Any]:
        value = row.get(col)
        return (value is None, value if isinstance(value, int | float | str) else 0)

    return key


def error(status: int, code: str, msg: str) -> Response:
    return Response.of({"success": False, "error": code, "msg": msg}, status)


class MarketAPI:
    """Routes requests to the market; `ssh_hosts` (set by the server) supplies SSH ports."""

    def __init__(self, market: SimMarket, base_url: str = "") -> None:
        self.market = market
        self.base_url = base_url
        self.fault_rng = random.Random(market.scenario.seed * 7919 + 17)
        self.log_results: dict[str, str] = {}
        self.ssh_host = "127.0.0.1"
        self.requests_seen = 0
        self.faults_injected: dict[str, int] = {}
        self.paced = market.scenario.pacing  # enforce PACING (the scenario may turn it off)
        self._tokens: dict[str, tuple[float, float]] = {}  # kind -> (tokens, market time)
        self.too_frequent = 0

    # -- auth and faults -----------------------------------------------------------------
    def _key(self, req: Request) -> str | None:
        auth = req.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return req.query.get("api_key")

    def _fault(self, req: Request) -> Response | None:
        f = self.market.scenario.faults
        r = self.fault_rng.random()
        edge = 0.0
        for name, rate in (("429", f.rate_429), ("5xx", f.rate_5xx)):
            edge += rate
            if r < edge:
                self.faults_injected[name] = self.faults_injected.get(name, 0) + 1
                if name == "429":
                    return RATE_LIMIT_BODIES[self.fault_rng.randrange(len(RATE_LIMIT_BODIES))]
                status = self.fault_rng.choice([500, 502, 503])
                return error(status, "server_error", "upstream error")
        return None

    @staticmethod
    def _kind(req: Request) -> str | None:
        p, meth = req.path, req.method
        if p.startswith("/api/v1/instances") and meth == "GET":
            return "list"
        if p.startswith("/api/v0/bundles") or p == "/api/v0/search/asks/":
            return "search"
        if _ASK.match(p) and meth == "PUT":
            return "create"
        if _INSTANCE.match(p):
            return {"GET": "show", "PUT": "manage", "DELETE": "destroy"}.get(meth)
        return None

    def _pace(self, req: Request, now: float) -> Response | None:
        """A token bucket per call kind in market time: BURST calls at once, then one per
        interval; past it, the real service's plain-text 429."""
        kind = self._kind(req)
        if not self.paced or kind is None:
            return None
        interval = PACING[kind]
        tokens, at = self._tokens.get(kind, (float(BURST), now))
        tokens = min(float(BURST), tokens + max(0.0, now - at) / interval)
        if tokens < 1.0:
            self._tokens[kind] = (tokens, now)
            self.too_frequent += 1
            return Response.text(f"API requests too frequent: endpoint threshold={interval}", 429)
        self._tokens[kind] = (tokens - 1.0, now)
        return None

    def _post_fault(self, resp: Response) -> Response:
        """Faults that hit after the action happened: a stall past the timeout, a garbled body."""
        f = self.market.scenario.faults
        r = self.fault_rng.random()
        if r < f.rate_timeout:
            self.faults_injected["timeout"] = self.faults_injected.get("timeout", 0) + 1
            resp.stall = f.timeout_s
        elif r < f.rate_timeout + f.rate_malformed:
            self.faults_injected["malformed"] = self.faults_injected.get("malformed", 0) + 1
            resp.body = resp.body[: max(1, len(resp.body) // 2)] + b'{"'
        return resp

    # -- dispatch ------------------------------------------------------------------------
    async def handle(self, req: Request) -> Response:
        self.requests_seen += 1
        now = self.market.clock.now()
        resp = self._route_public(req)
        if resp is None:
            key = self._key(req)
            scoped = self.market.instance_for_key(key) if key else None
            if key != self.market.api_key and scoped is None:
                resp = error(401, "auth_error", "Invalid user key")
            else:
                fault = self._fault(req) or self._pace(req, now)
                if fault is not None:
                    resp = fault
                else:
                    try:
                        resp = self._route(req, scoped)
                    except (ValueError, TypeError, KeyError) as exc:
                        resp = error(400, "invalid_args", f"bad request: {exc}")
                    resp = self._post_fault(resp)
        resp.headers["X-Market-Time"] = f"{now:.3f}"
        return resp

    def _route_public(self, req: Request) -> Response | None:
        if req.path == "/sim/v0/truth" and req.method == "GET":
            return Response.of(self.market.truth())
        if req.path == "/sim/v0/clock" and req.method == "GET":
            return Response.of(
                {
                    "now": self.market.clock.now(),
                    "time_scale": self.market.clock.time_scale,
                    "gpu_billing": self.market.scenario.gpu_billing,
                }
            )
        m = _RESULT.match(req.path)
        if m and req.method == "GET":
            text = self.log_results.get(m.group(1))
            return Response.text(text) if text is not None else Response.text("not found", 404)
        return None

    def _route(self, req: Request, scoped: int | None) -> Response:
        p, meth = req.path, req.method
        self.market.market_stops(self.market.clock.now())
        if scoped is not None:
            # a container-scoped key may only start, stop or destroy its own instance
            m = _INSTANCE.match(p)
            if not (m and int(m.group(1)) == scoped and meth in ("PUT", "DELETE", "GET")):
                return error(403, "forbidden", "this key is scoped to one instance")
        if p in ("/api/v0/bundles", "/api/v0/bundles/") and meth == "POST":
            return self.search(req.json())
        if p == "/api/v0/search/asks/" and meth == "PUT":
            return self.search((req.json() or {}).get("q", {}))
        if p in ("/api/v1/instances", "/api/v1/instances/") and meth == "GET":
            return self.list_v1(req.query)
        if p in ("/api/v0/instances", "/api/v0/instances/") and meth == "GET":
            return Response.of({"instances": [self.instance_json(i) for i in self._visible()]})
        if p == "/api/v0/instances/filters/" and meth == "GET":
            return Response.of(
                {
                    "filters": [
                        {
                            "col": "actual_status",
                            "values": sorted(
                                {
                                    str(self.instance_json(i)["actual_status"])
                                    for i in self._visible()
                                }
                            ),
                        }
                    ]
                }
            )
        if p in ("/api/v0/charges", "/api/v0/charges/") and meth == "GET":
            return self.charges(req.query)
        if p in ("/api/v0/gpu_names/unique", "/api/v0/gpu_names/unique/"):
            return Response.of(
                {"gpu_names": sorted({m.advertised_gpu for m in self.market.machines})}
            )
        if p in ("/api/v0/users/current", "/api/v0/users/current/"):
            return Response.of(
                {
                    "id": 4242,
                    "username": "renter",
                    "email": "renter@example.com",
                    "balance": 100.0,
                    "credit": 100.0,
                    "has_billing": True,
                    "ssh_key": self.market.ssh_keys[-1]["key"] if self.market.ssh_keys else None,
                }
            )
        if p in ("/api/v0/ssh", "/api/v0/ssh/"):
            if meth == "GET":
                return Response.of(self.market.ssh_keys)
            if meth == "POST":
                return self.add_key(str(req.json().get("ssh_key", "")))
        m = _ATTACH.match(p)
        if m and meth == "POST":
            if self.market.live(int(m.group(1))) is None:
                return error(404, "no_such_instance", "Instance does not exist")
            return self.add_key(str(req.json().get("ssh_key", "")))
        m = _ASK.match(p)
        if m and meth == "PUT":
            return self.create(int(m.group(1)), req.json())
        m = _LOGS.match(p)
        if m and meth == "PUT":
            return self.request_logs(int(m.group(1)), req.json())
        m = _INSTANCE.match(p)
        if m:
            iid = int(m.group(1))
            if meth == "GET":
                inst = self.market.live(iid)
                return Response.of({"instances": self.instance_json(inst) if inst else None})
            if meth == "PUT":
                return self.update(iid, req.json())
            if meth == "DELETE":
                return self.destroy(iid)
        return error(404, "not_found", f"no route for {meth} {p}")

    # -- handlers ------------------------------------------------------------------------
    def search(self, q: Any) -> Response:
        if not isinstance(q, dict):
            return error(400, "invalid_args", "query must be an object")
        order = q.get("order") or [["score", "desc"]]
        limit = q.get("limit")
        storage = float(q.get("allocated_storage") or 5.0)
        now = self.market.clock.now()
        offers = [m.offer_json(storage, now) for m in self.market.offers()]
        filters = {k: v for k, v in q.items() if isinstance(v, dict)}
        offers = [o for o in offers if matches(o, filters)]
        for col, direction in reversed(
            [tuple(o) for o in order if isinstance(o, list | tuple) and len(o) == 2]
        ):
            offers.sort(
                key=_sort_key(col),
                reverse=str(direction).lower() == "desc",
            )
        if limit is not None:
            offers = offers[: max(0, int(limit))]
        return Response.of({"offers": offers})

    def _visible(self) -> list[SimInstance]:
        return sorted(
            (i for i in self.market.instances.values() if i.destroyed_at is None),
            key=lambda i: i.id,
        )

    def _visible_by_id(self) -> list[SimInstance]:
        """Live instances in id order, without a sort (creation order is id order)."""
        out = []
        for iid in self.market.order:
            inst = self.market.instances[iid]
            if inst.destroyed_at is None:
                out.append(inst)
        return out

    def list_v1(self, query: dict[str, str]) -> Response:
        filters = json.loads(query.get("select_filters") or "{}")
        order_by = json.loads(query.get("order_by") or '[{"col": "id", "dir": "asc"}]')
        limit = max(1, min(int(query.get("limit") or MAX_PAGE), MAX_PAGE))
        if filters in ({}, None) and order_by == [{"col": "id", "dir": "asc"}]:
            return self._list_by_id(query.get("after_token"), limit)
        visible = self._visible_by_id()
        wanted = filters.get("label") if isinstance(filters, dict) else None
        if isinstance(wanted, dict) and set(wanted) == {"in"} and isinstance(wanted["in"], list):
            # by label (the poll plan's hot list): pick before rendering, so the call costs
            # the rows it returns, not the whole account
            labels = {v for v in wanted["in"] if v is None or isinstance(v, str)}
            visible = [i for i in visible if i.label in labels]
        states = filters.get("actual_status") if isinstance(filters, dict) else None
        if isinstance(states, dict) and set(states) == {"in"} and isinstance(states["in"], list):
            now = self.market.clock.now()  # by state: the same pick, on the status alone
            visible = [i for i in visible if i.status(now)[0] in states["in"]]
        rows = [self.instance_json(i) for i in visible]
        if isinstance(filters, dict):
            rows = [r for r in rows if matches(r, filters)]
        for spec in reversed(order_by if isinstance(order_by, list) else []):
            if isinstance(spec, dict) and "col" in spec:
                col = spec["col"]
                rows.sort(
                    key=_sort_key(str(col)),
                    reverse=str(spec.get("dir", "asc")).lower() == "desc",
                )
        start = 0
        token = query.get("after_token")
        if token:
            try:
                start = int(base64.urlsafe_b64decode(token.encode()).decode())
            except (ValueError, UnicodeDecodeError):
                return error(400, "invalid_args", "bad after_token")
        page = rows[start : start + limit]
        nxt = start + limit
        next_token = (
            base64.urlsafe_b64encode(str(nxt).encode()).decode() if nxt < len(rows) else None
        )
        return Response.of(
            {
                "instances": page,
                "next_token": next_token,
                "total_instances": len(rows),
                "label_counts": {},
                "success": True,
            }
        )

    def _list_by_id(self, token: str | None, limit: int) -> Response:
        """The common list (no filter, by id): a cursor after the last id sent, so a full list
        of n instances costs O(n) however many pages it takes (ids only grow, so the market's
        creation order is id order)."""
        after = 0
        if token:
            try:
                text = base64.urlsafe_b64decode(token.encode()).decode()
                after = int(text.removeprefix("id:")) if text.startswith("id:") else -1
            except (ValueError, UnicodeDecodeError):
                after = -1
            if after < 0:
                return error(400, "invalid_args", "bad after_token")
        order = self.market.order
        page: list[SimInstance] = []
        more = False
        for iid in order[bisect.bisect_right(order, after) :]:
            inst = self.market.instances[iid]
            if inst.destroyed_at is not None:
                continue
            if len(page) == limit:
                more = True
                break
            page.append(inst)
        next_token = (
            base64.urlsafe_b64encode(f"id:{page[-1].id}".encode()).decode()
            if more and page
            else None
        )
        return Response.of(
            {
                "instances": [self.instance_json(i) for i in page],
                "next_token": next_token,
                "total_instances": self.market.live_count(),
                "label_counts": {},
                "success": True,
            }
        )

    def charges(self, query: dict[str, str]) -> Response:
        """The market's own bill per instance and UTC day, as `vastai show invoices-v1
        --charges` asks for it (vastai `api/billing.py` show_invoices_v1: `select_filters` on
        `day` and `type`, `limit` up to 100, `after_token`, `latest_first`) and reads it
        (`cli/commands/billing.py`: `type`, `source` "instance-ID", `amount`, `start`, `end`,
        `description`, `items`, `metadata`)."""
        filters = json.loads(query.get("select_filters") or "{}")
        if not isinstance(filters, dict):
            return error(400, "invalid_args", "select_filters must be an object")
        now = self.market.clock.now()
        day_filter = filters.get("day")
        day_filter = day_filter if isinstance(day_filter, dict) else {}
        lo = float(day_filter.get("gte", now - 7 * DAY))
        hi = float(day_filter.get("lte", now))
        type_filter = filters.get("type")
        types = type_filter.get("in") if isinstance(type_filter, dict) else None
        limit = max(1, min(int(query.get("limit") or 20), 100))
        rows: list[dict[str, Any]] = []
        if not types or "instance" in types:
            mode = self.market.scenario.gpu_billing
            for inst in sorted(self.market.instances.values(), key=lambda i: i.id):
                end = min(now, inst.destroyed_at if inst.destroyed_at is not None else now)
                day = inst.created_at // DAY * DAY
                while day <= end:
                    d_end = day + DAY
                    if d_end > lo and day <= hi:
                        row = self._charge_row(inst, mode, day, min(d_end, now))
                        if row is not None:
                            rows.append(row)
                    day = d_end
        rows.sort(key=lambda r: (r["day"], r["metadata"]["instance_id"]))
        if str(query.get("latest_first", "false")).lower() == "true":
            rows.reverse()
        start = 0
        token = query.get("after_token")
        if token:
            try:
                start = int(base64.urlsafe_b64decode(token.encode()).decode())
            except (ValueError, UnicodeDecodeError):
                return error(400, "invalid_args", "bad after_token")
        page = rows[start : start + limit]
        nxt = start + limit
        return Response.of(
            {
                "results": page,
                "count": len(page),
                "total": len(rows),
                "next_token": base64.urlsafe_b64encode(str(nxt).encode()).decode()
                if nxt < len(rows)
                else None,
            }
        )

    @staticmethod
    def _charge_row(inst: SimInstance, mode: str, t0: float, t1: float) -> dict[str, Any] | None:
        a, b = inst.charges(t0, mode), inst.charges(t1, mode)
        parts = {
            "gpu": b.gpu_usd - a.gpu_usd,
            "storage": b.storage_usd - a.storage_usd,
            "bandwidth": b.bandwidth_usd - a.bandwidth_usd,
        }
        amount = sum(parts.values())
        if amount <= 0:
            return None
        source = f"instance-{inst.id}"
        items: list[dict[str, Any]] = [
            {
                "type": kind,
                "source": None,
                "amount": round(usd, 9),
                "start": t0,
                "end": t1,
                "description": f"{kind} charges",
                "items": [],
                "metadata": {},
            }
            for kind, usd in parts.items()
            if usd > 0
        ]
        return {
            "type": "instance",
            "source": source,
            "amount": round(amount, 9),
            "start": t0,
            "end": t1,
            "day": t0,
            "description": f"{inst.machine.advertised_gpu} on machine {inst.machine.id}",
            "items": items,
            "metadata": {"instance_id": inst.id, "label": inst.label},
        }

    def create(self, offer_id: int, body: Any) -> Response:
        if not isinstance(body, dict):
            return error(400, "invalid_args", "body must be an object")
        m = self.market.by_offer.get(offer_id)
        if m is None or m.id in self.market.rented_machines():
            return error(404, "no_such_ask", f"Instance type by id {offer_id} is not available.")
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
        inst = self.market.create(
            offer_id,
            image,
            disk,
            str(label) if label else None,
            {str(k): str(v) for k, v in env.items()},
            body.get("onstart"),
        )
        return Response.of(
            {"success": True, "new_contract": inst.id, "instance_api_key": inst.api_key}
        )

    def update(self, iid: int, body: Any) -> Response:
        inst = self.market.live(iid)
        if inst is None:
            return error(404, "no_such_instance", "Instance does not exist")
        if not isinstance(body, dict):
            return error(400, "invalid_args", "body must be an object")
        if "label" in body:
            inst.label = None if body["label"] is None else str(body["label"])[:256]
        state = body.get("state")
        if state == "stopped":
            self.market.stop(inst)
        elif state == "running":
            if self.market.contract_over(inst):
                return error(400, "invalid_args", "the host's rental contract has ended")
            self.market.start(inst)
        elif state is not None:
            return error(400, "invalid_args", f"unknown state {state!r}")
        elif "label" not in body:
            return error(400, "invalid_args", "nothing to update")
        return Response.of({"success": True})

    def destroy(self, iid: int) -> Response:
        inst = self.market.live(iid)
        if inst is None:
            return error(404, "no_such_instance", "Instance does not exist")
        self.market.destroy(inst)
        return Response.of({"success": True})

    def request_logs(self, iid: int, body: Any) -> Response:
        inst = self.market.live(iid)
        if inst is None:
            return error(404, "no_such_instance", "Instance does not exist")
        tail = 1000
        if isinstance(body, dict) and body.get("tail"):
            tail = max(1, int(body["tail"]))
        now = self.market.clock.now()
        lines = []
        for seg in inst.segments:
            for step in seg.steps:
                if step.at <= now and step.msg and (seg.end is None or step.at < seg.end):
                    lines.append(step.msg)
        token = secrets.token_hex(12)
        self.log_results[token] = "\n".join(lines[-tail:]) + "\n"
        return Response.of(
            {
                "success": True,
                "result_url": f"{self.base_url}/sim/v0/logs/{token}",
                "msg": "Logs are being prepared",
            }
        )

    def add_key(self, key: str) -> Response:
        key = key.strip()
        if not key.startswith(("ssh-", "ecdsa-")):
            return error(400, "invalid_args", "not an OpenSSH public key")
        if not any(k["key"] == key for k in self.market.ssh_keys):
            self.market.ssh_keys.append(
                {
                    "id": len(self.market.ssh_keys) + 1,
                    "key": key,
                    "user_id": 4242,
                    "created_at": self.market.clock.now(),
                }
            )
        return Response.of({"success": True, "key": self.market.ssh_keys[-1]})

    # -- instance JSON -------------------------------------------------------------------
    def instance_json(self, inst: SimInstance) -> dict[str, Any]:
        now = self.market.clock.now()
        m = inst.machine
        actual, msg = inst.status(now)
        running = actual == "running"
        seg = inst.segments[-1]
        uptime = (now - seg.running_at) / 60 if running and seg.running_at else None
        gpu = self.market.gpu_state(inst, now) if running else None
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
            "cur_state": "running" if intended == "running" else "stopped",
            "next_state": intended,
            "status_msg": msg,
            "start_date": inst.created_at,
            "extra_env": [[k, v] for k, v in inst.env.items()],
            "onstart": inst.onstart,
            "dph_base": inst.gpu_dph,
            "dph_total": round(inst.gpu_dph + inst.storage_dph, 6),
            "storage_total_cost": round(inst.storage_dph, 6),
            "storage_cost": m.storage_cost,
            "disk_space": inst.disk_gb,
            "gpu_name": m.advertised_gpu,
            "num_gpus": 1,
            "gpu_ram": self._vram(m.advertised_gpu),
            "gpu_util": gpu["util"] if gpu else None,
            "gpu_temp": gpu["temp"] if gpu else None,
            "vmem_usage": 0.4 if running else None,
            "driver_version": m.driver_version,
            "cuda_max_good": m.cuda_max_good,
            "reliability2": m.reliability,
            "verification": "verified",
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
            "is_bid": False,
            "min_bid": round(m.dph_base * 0.6, 6),
            "end_date": m.contract_end,
            "template_id": None,
            "template_hash_id": None,
        }

    @staticmethod
    def _vram(gpu: str) -> int:
        from ..core.gpu_specs import GPU_SPECS

        spec = GPU_SPECS.get(gpu)
        return spec.vram_mb if spec else 24576
