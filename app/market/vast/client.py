"""The async Vast.ai client: the REST subset, typed results, retries that respect the API's
documented pacing, and creates that are never duplicated by a retry. A bad row in a list costs
that row (counted in `bad_rows`), never the whole answer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from typing import TYPE_CHECKING, Any

import httpx

from ...core.errors import BadRow, MalformedAnswer
from ...core.models import Instance, Offer
from ..errors import REFUSALS, ApiError, CreateResult, MarketUnavailable, NotFound
from ..protocol import PAGE, Capabilities, ListFilter
from .changes import StateChanges
from .price_increases import PriceIncreases
from .rows import parse_instance, parse_offer
from .transport import CREATE_TIMEOUT, Again

# The market's own charges (`GET /api/v0/charges/`, as `vastai show invoices-v1 --charges`
# reads them: vastai `api/billing.py` show_invoices_v1).
CHARGES_PATH = "/api/v0/charges/"
# What the official CLI searches for unless told otherwise (vastai 1.9.1
# `cli/commands/offers.py` search__offers: "default: 'external=false rentable=true
# verified=true'"); a campaign's offer_query that names one of these fields decides it.
OFFER_DEFAULTS: dict[str, Any] = {
    "verified": {"eq": True},
    "external": {"eq": False},
    "rentable": {"eq": True},
}


def select_filters(where: ListFilter | None) -> dict[str, Any]:
    """A list filter in the words of Vast's `select_filters`."""
    out: dict[str, Any] = {}
    if where is not None and where.labels is not None:
        out["label"] = {"in": list(where.labels)}
    if where is not None and where.statuses is not None:
        out["actual_status"] = {"in": [str(s) for s in where.statuses]}
    return out


class VastClient(StateChanges, PriceIncreases):
    """The Vast.ai endpoints rentwatch uses, each a typed call over the paced transport."""

    caps = Capabilities(paging=True, bids=True, copies=True, market_clock=True, charges=True)

    # -- offers ---------------------------------------------------------------------------
    async def search_offers(
        self,
        query: dict[str, Any],
        *,
        limit: int | None = 200,
        storage_gb: float = 10.0,
        rental: str = "on-demand",
    ) -> list[Offer]:
        """Offers of one tier: `rental` "interruptible" searches `type: "bid"` (the OpenAPI's enum;
        the CLI maps interruptible to bid), priced at `min_bid`; anything else `on-demand`."""
        # the query's own terms win; {} (the campaign's `field=any`) is no filter at all
        body: dict[str, Any] = {k: v for k, v in {**OFFER_DEFAULTS, **query}.items() if v != {}}
        body["order"] = [["dph_total", "asc"]]
        body["type"] = "bid" if rental == "interruptible" else "on-demand"
        body["allocated_storage"] = storage_gb
        if limit:
            body["limit"] = limit
        data = await self._request("POST", "/api/v0/bundles/", kind="search", body=body)
        rows = data.get("offers") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise MalformedAnswer("offer search answered without an offers list")
        out = []
        for row in rows:
            with contextlib.suppress(MalformedAnswer):  # one bad offer does not spoil the list
                out.append(parse_offer(row))
        return out

    # -- instances ------------------------------------------------------------------------
    async def list_instances(self, page_size: int = PAGE) -> list[Instance]:
        """Every instance of the account, in pages of at most 25 (the documented maximum); an
        unreadable row is skipped and noted in `bad_rows`."""
        out: list[Instance] = []
        token: str | None = None
        for _ in range(10_000):
            rows, token = await self.list_page(None, token, page_size)
            out.extend(rows)
            if not token:
                return out
        raise MalformedAnswer("instance list never ended (next_token loops)")

    async def list_page(
        self,
        where: ListFilter | None = None,
        after_token: str | None = None,
        page_size: int = PAGE,
    ) -> tuple[list[Instance], str | None]:
        """The filter is sent as `vastai show instances` sends its own (vastai 1.9.1
        `cli/commands/instances.py`)."""
        params: dict[str, Any] = {
            "select_filters": json.dumps(select_filters(where)),
            "order_by": json.dumps([{"col": "id", "dir": "asc"}]),
            "limit": str(max(1, min(page_size, PAGE))),
        }
        if after_token:
            params["after_token"] = after_token
        data = await self._request("GET", "/api/v1/instances/", kind="list", params=params)
        if not isinstance(data, dict) or not isinstance(data.get("instances"), list):
            raise MalformedAnswer("instance list answered without an instances list")
        out: list[Instance] = []
        for row in data["instances"]:
            try:
                out.append(parse_instance(row))
            except MalformedAnswer as exc:
                self._bad_row(row, exc)
        token = data.get("next_token")
        return out, (str(token) if token else None)

    def unread_rows(self) -> tuple[int, list[tuple[int | None, str]]]:
        return self.bad_row_count, self.bad_rows

    def _bad_row(self, row: Any, exc: MalformedAnswer) -> None:
        self.bad_row_count += 1
        rid = row.get("id") if isinstance(row, dict) else None
        iid = rid if isinstance(rid, int) and not isinstance(rid, bool) else None
        self.bad_rows.append((iid, str(exc)[:200]))
        del self.bad_rows[:-1000]  # the latest thousand are plenty to explain a poll

    async def show_instance(self, instance_id: int) -> Instance | None:
        data = await self._request(
            "GET", f"/api/v0/instances/{int(instance_id)}/", kind="show", params={"owner": "me"}
        )
        if not isinstance(data, dict) or "instances" not in data:
            raise MalformedAnswer("show instance answered without an instances field")
        row = data["instances"]
        if row is None:
            return None
        try:
            return parse_instance(row)
        except MalformedAnswer as exc:  # it exists; this row of it cannot be read
            raise BadRow(int(instance_id), str(exc)[:200]) from None

    async def create_instance(
        self,
        offer_id: int,
        *,
        image: str,
        disk_gb: float,
        label: str | None = None,
        onstart: str | None = None,
        exact_label: bool = False,
        price: float | None = None,
    ) -> CreateResult:
        """Retried only when the instance list shows no create with the label. A bid is
        openapi.yaml createInstance's `price` (the CLI's `--bid_price`); the answer does not say
        which tier was made (vast-cli PR #403)."""
        if not (exact_label and label):
            tag = f"rw-{secrets.token_hex(5)}"
            label = f"{label}:{tag}" if label else tag
        body = {
            "client_id": "me",
            "image": image,
            "disk": disk_gb,
            "label": label,
            "env": {},
            "onstart": onstart,
            # direct and proxy SSH, as the CLI asks with --ssh --direct (vastai
            # `api/instances.py` resolve_runtype) and SkyPilot does; plain "ssh" is proxy-only
            "runtype": "ssh_direc ssh_proxy",
            "price": price,
        }
        if price is None:
            # "Defaults to false for interruptibles" (openapi.yaml): a bid keeps the default,
            # as dstack's does, so a bid that does not win now waits instead of failing
            body["cancel_unavail"] = True
        path = f"/api/v0/asks/{int(offer_id)}/"

        async def one_try() -> CreateResult:
            try:
                data = await self._once(
                    "PUT", path, kind="create", body=body, timeout=CREATE_TIMEOUT
                )
            except REFUSALS as exc:
                if isinstance(exc, ApiError) and exc.status < 500:
                    if exc.named_instance is not None:
                        return CreateResult(exc.named_instance, label, refused=exc.msg[:300])
                    if exc.status != 429:
                        raise
                # did the create happen? (the list's own tries exhausted: the create's too)
                found = next((i for i in await self.list_instances() if i.label == label), None)
                if found is None:
                    if isinstance(exc, MalformedAnswer):
                        raise
                    raise Again(exc) from None
                return CreateResult(found.id, label, found.start_date)
            if (
                not isinstance(data, dict)
                or not data.get("success")
                or data.get("new_contract") is None
            ):
                raise MalformedAnswer(f"create answered without new_contract: {str(data)[:120]}")
            try:
                return CreateResult(int(data["new_contract"]), label)
            except (TypeError, ValueError):
                raise MalformedAnswer("create answered with a non-integer new_contract") from None

        return await self._retried(one_try, self.max_attempts, f"create on offer {offer_id}")

    async def request_logs(self, instance_id: int, tail: int = 200) -> str:
        data = await self._request(
            "PUT", f"/api/v0/instances/request_logs/{int(instance_id)}/", body={"tail": str(tail)}
        )
        url = data.get("result_url") if isinstance(data, dict) else None
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise MalformedAnswer("log request answered without a result_url")
        for _ in range(30):
            try:
                async with self._out():
                    r = await self._http.get(url, timeout=self.timeout)
                if r.status_code == 200:
                    return r.text[:1_000_000]
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.3)
        raise MarketUnavailable(f"logs of {instance_id} were not ready in time")

    async def charges(self, start: float, end: float) -> list[dict[str, Any]]:
        """The market's instance charges between two epoch times, every page (`invoices-v1`)."""
        params: dict[str, Any] = {
            "select_filters": json.dumps(
                {"day": {"gte": int(start), "lte": int(end) + 1}, "type": {"in": ["instance"]}}
            ),
            "latest_first": "false",
            "limit": "100",
            "format": "table",
        }
        out: list[dict[str, Any]] = []
        for _ in range(10_000):
            data = await self._request("GET", CHARGES_PATH, kind="charges", params=params)
            rows = data.get("results") if isinstance(data, dict) else None
            if not isinstance(rows, list):
                raise MalformedAnswer("charges answered without a results list")
            out.extend(r for r in rows if isinstance(r, dict))
            token = data.get("next_token")
            if not token:
                return out
            params["after_token"] = str(token)
        raise MalformedAnswer("charges never ended (next_token loops)")

    async def ssh_keys(self) -> list[dict[str, Any]]:
        try:
            data = await self._request("GET", "/api/v0/ssh/")
        except NotFound:
            return []  # a brand-new account may answer 404 until its first key
        if not isinstance(data, list):
            raise MalformedAnswer("ssh key list is not a list")
        return [k for k in data if isinstance(k, dict)]

    async def attach_ssh_key(self, instance_id: int, public_key: str) -> None:
        """Attach a key to one existing instance: the account's keys reach new instances only
        (vast-ai/docs guides/instances/connect/ssh.mdx; openapi.yaml attachSshKey)."""
        await self._request(
            "POST",
            f"/api/v0/instances/{int(instance_id)}/ssh/",
            kind="manage",
            body={"ssh_key": public_key},
        )

    async def instance_ssh_keys(self, instance_id: int) -> list[str]:
        """The public keys one instance accepts (openapi.yaml showSshKeys: `ssh_keys` is a
        JSON string of key objects, decoded a second time)."""
        data = await self._request("GET", f"/api/v0/instances/{int(instance_id)}/ssh/", kind="show")
        raw = data.get("ssh_keys") if isinstance(data, dict) else None
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except ValueError:
                raise MalformedAnswer("an instance's ssh_keys is not JSON") from None
        if not isinstance(raw, list):
            raise MalformedAnswer("an instance's ssh_keys is not a list")
        return [str(k.get("public_key") or k.get("key") or "") for k in raw if isinstance(k, dict)]

    async def add_ssh_key(self, public_key: str) -> None:
        keys = await self.ssh_keys()
        if any(str(k.get("key", "")).split()[1:2] == public_key.split()[1:2] for k in keys):
            return
        await self._request("POST", "/api/v0/ssh/", body={"ssh_key": public_key})


if TYPE_CHECKING:  # the Vast client implements the protocol (mypy checks this line)
    from ..protocol import Market

    _VAST: type[Market] = VastClient
