"""The account: who it is (`/users/current/`), its SSH keys (and a key attached to one
instance), the GPU names the market lists, and the market's own charges
(`GET /api/v0/charges/`, as `vastai show invoices-v1 --charges` asks for them)."""

from __future__ import annotations

import json

from aiohttp import web

from .answers import answer, body_json, error, offset_token, query_of, read_offset_token
from .market import SimMarket
from .rental import SimInstance

DAY = 86400.0


class AccountRoutes:
    def __init__(self, market: SimMarket) -> None:
        self.market = market

    async def current_user(self, request: web.Request) -> web.Response:
        keys = self.market.ssh_keys
        return answer(
            {
                "id": 4242,
                "username": "renter",
                "email": "renter@example.com",
                "balance": 100.0,
                "credit": 100.0,
                "has_billing": True,
                "ssh_key": keys[-1]["key"] if keys else None,
            }
        )

    async def gpu_names(self, request: web.Request) -> web.Response:
        return answer({"gpu_names": sorted({m.advertised_gpu for m in self.market.machines})})

    async def list_keys(self, request: web.Request) -> web.Response:
        return answer(self.market.ssh_keys)

    async def add_key(self, request: web.Request) -> web.Response:
        return self.add(str((await body_json(request)).get("ssh_key", "")))

    async def attach_key(self, request: web.Request) -> web.Response:
        if self.market.live(int(request.match_info["iid"])) is None:
            return error(404, "no_such_instance", "Instance does not exist")
        key = str((await body_json(request)).get("ssh_key", "")).strip()
        if not key.startswith(("ssh-", "ecdsa-")):
            return error(400, "invalid_args", "not an OpenSSH public key")
        if key not in inst.ssh_keys:
            inst.ssh_keys.append(key)
        return answer({"success": True, "msg": "SSH key attached successfully"})

    async def instance_keys(self, request: web.Request) -> web.Response:
        """`GET /api/v0/instances/{id}/ssh/`: `ssh_keys` is a JSON *string* of the key objects
        (openapi.yaml showSshKeys), decoded a second time by the caller."""
        inst = self.market.live(int(request.match_info["iid"]))
        if inst is None:
            return error(404, "no_such_instance", "Instance does not exist")
        keys = [
            {"id": n + 1, "name": f"key-{n + 1}", "public_key": k}
            for n, k in enumerate(inst.ssh_keys)
        ]
        return answer({"success": True, "ssh_keys": json.dumps(keys)})

    def add(self, key: str) -> web.Response:
        key = key.strip()
        if not key.startswith(("ssh-", "ecdsa-")):
            return error(400, "invalid_args", "not an OpenSSH public key")
        keys = self.market.ssh_keys
        if not any(k["key"] == key for k in keys):
            keys.append(
                {
                    "id": len(keys) + 1,
                    "key": key,
                    "user_id": 4242,
                    "created_at": self.market.clock.now(),
                }
            )
        return answer({"success": True, "key": keys[-1]})

    async def list_charges(self, request: web.Request) -> web.Response:
        return self.charges(query_of(request))

    def charges(self, query: dict[str, str]) -> web.Response:
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
                        row = _charge_row(inst, mode, day, min(d_end, now))
                        if row is not None:
                            rows.append(row)
                    day = d_end
        rows.sort(key=lambda r: (r["day"], r["metadata"]["instance_id"]))
        if str(query.get("latest_first", "false")).lower() == "true":
            rows.reverse()
        start = read_offset_token(query.get("after_token"))
        if start is None:
            return error(400, "invalid_args", "bad after_token")
        page = rows[start : start + limit]
        nxt = start + limit
        return answer(
            {
                "results": page,
                "count": len(page),
                "total": len(rows),
                "next_token": offset_token(nxt) if nxt < len(rows) else None,
            }
        )


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
        "source": f"instance-{inst.id}",
        "amount": round(amount, 9),
        "start": t0,
        "end": t1,
        "day": t0,
        "description": f"{inst.machine.advertised_gpu} on machine {inst.machine.id}",
        "items": items,
        "metadata": {"instance_id": inst.id, "label": inst.label},
    }
