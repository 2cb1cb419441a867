"""The account: who it is (`/users/current/`), its SSH keys (and a key attached to one
instance), the GPU names the market lists. Its charges: `charges.py`."""

from __future__ import annotations

import json

from aiohttp import web

from .answers import answer, body_json, error
from .market import SimMarket


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

    async def attach_key(self, request: web.Request) -> web.Response:
        """`POST /api/v0/instances/{id}/ssh/`: the key reaches this instance only (attachSshKey)."""
        inst = self.market.live(int(request.match_info["iid"]))
        if inst is None:
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

    async def add_key(self, request: web.Request) -> web.Response:
        key = str((await body_json(request)).get("ssh_key", "")).strip()
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
