"""Changes to an instance that already exists: stop, start, relabel and destroy, each said
again until the market confirms it and dated to when it took effect, and a new bid price.

An answer lost to a timeout may hide a change that did happen, so a change confirmed by a
later try is dated to the first unanswered try; `on_try` hears of each try as it goes out, so
the ledger can date the change even when this process dies waiting for the answer.
"""

from __future__ import annotations

from typing import Any

from ...core.errors import MalformedAnswer
from ..errors import Acted, AnswerLost, ApiError, MarketUnavailable, NotFound, OnTry
from .transport import RETRYABLE, Transport


class StateChanges(Transport):
    """The state-change calls `VastClient` inherits, each over the paced transport."""

    async def _act(
        self, method: str, path: str, body: dict[str, Any], kind: str, on_try: OnTry | None
    ) -> Acted:
        """Say a state change until the market confirms it, and work out when it took effect.

        A garbled 2xx answer means the market acted (its clock header still reads). An answer
        lost to a timeout may hide an action that did happen: when a later try confirms the
        change (or a destroy finds the instance already gone), the change is dated to when the
        first unanswered try was sent, since a market acts on a request as it arrives. So the
        ledger bills what the market bills even when answers are lost.

        `on_try(sent_at, previous)` is told of each try as it goes out, with what became of the
        try before it ("refused" or "lost"): written down, it dates the change even when this
        process dies before the answer comes (see Supervisor.reconcile).
        """
        first_unanswered: float | None = None
        previous: str | None = None
        delay = self.backoff
        sent_at = self.now()

        def going() -> None:  # called after pacing, as the request leaves
            nonlocal sent_at
            sent_at = self.now()
            if on_try is not None:
                on_try(sent_at, previous)

        for _ in range(self.max_attempts):
            try:
                await self._request(method, path, kind=kind, body=body, retry=False, on_send=going)
                return self._acted(first_unanswered)
            except MalformedAnswer:
                return self._acted(first_unanswered)
            except NotFound:
                if first_unanswered is not None:
                    return self._acted(first_unanswered)  # our own lost try did it
                if method != "DELETE":
                    raise
                return Acted(self.answered_at(), existed=False)
            except AnswerLost:
                previous = "lost"
                if first_unanswered is None:
                    first_unanswered = sent_at
            except ApiError as exc:
                if exc.status not in RETRYABLE:
                    raise
                previous = "refused"
            self.stats.retries += 1
            await self._back_off(delay)
            delay = min(delay * 2, 10.0)
        raise MarketUnavailable(
            f"{method} {path}: no confirmed answer after {self.max_attempts} tries"
        )

    def _acted(self, first_unanswered: float | None) -> Acted:
        if first_unanswered is None:
            return Acted(self.answered_at())
        return Acted(first_unanswered, answer_lost=True)

    def _instance_path(self, instance_id: int) -> str:
        return f"/api/v0/instances/{int(instance_id)}/"

    async def stop_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        return await self._act(
            "PUT", self._instance_path(instance_id), {"state": "stopped"}, "manage", on_try
        )

    async def start_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        return await self._act(
            "PUT", self._instance_path(instance_id), {"state": "running"}, "manage", on_try
        )

    async def change_bid(self, instance_id: int, price: float | None, num_gpus: int = 1) -> None:
        """`PUT /api/v0/instances/bid_price/{id}/` with `{"client_id": "me", "price": P}`
        (openapi.yaml change bid; the CLI's `change bid`). P is the machine's price, all its
        GPUs ("per machine bid price in $/hour", the CLI's `--price`; the CLI then prints "Per
        gpu bid price changed", which the API's cap contradicts): from $0.001/h to 32.0 x its
        number of GPUs (`change_bid.yaml` x-input-validation). None sends `"price": null`,
        as the CLI does with no `--price`: the market bids "a winning bid price". Raises
        NotFound for an instance no longer there, ApiError for a refused price."""
        cap = 32.0 * max(1, num_gpus)
        if price is not None and not 0.001 <= price <= cap:
            raise ValueError(f"a bid on {num_gpus} GPU(s) is $0.001-{cap:g}/h, not {price!r}")
        await self._request(
            "PUT",
            f"/api/v0/instances/bid_price/{int(instance_id)}/",
            kind="bid",
            body={"client_id": "me", "price": None if price is None else round(price, 6)},
        )

    async def copy_between(self, src_id: int, src_path: str, dst_id: int, dst_path: str) -> None:
        """`PUT /api/v0/commands/copy_direct/` with `{"client_id": "me", "src_id", "dst_id",
        "src_path", "dst_path"}` (vast-ai/docs `api-reference/openapi/yaml/copy.yaml`; the CLI's
        `copy` between two instances, which sends the ids as given). Answered `{"success":
        true, "msg": ...}` once the copy is under way; an answer with `success` false is a
        refusal (ApiError 400) carrying the market's `msg`, as the CLI prints it.

        Not idempotent: each ask starts a transfer that bills bandwidth on both machines. So
        only a 429 (not acted on) is asked again; a lost answer (AnswerLost) or a 5xx is raised
        after one try, for the caller to treat as a copy that may be under way."""
        for path in (src_path, dst_path):
            if not path.startswith("/") or "\0" in path:
                raise ValueError(f"a copy's path is absolute in the container, not {path!r}")
        body = {
            "client_id": "me",
            "src_id": str(int(src_id)),
            "dst_id": str(int(dst_id)),
            "src_path": src_path,
            "dst_path": dst_path,
        }
        data = await self._request(
            "PUT", "/api/v0/commands/copy_direct/", kind="copy", body=body, idempotent=False
        )
        if isinstance(data, dict) and data.get("success") is False:
            raise ApiError(400, str(data.get("error") or "copy_refused"), str(data.get("msg")))

    async def cancel_copies_to(self, dst_id: int) -> None:
        """`DELETE /api/v0/commands/copy_direct/` with `{"client_id": "me", "dst_id"}` (vast-ai/docs
        `api-reference/openapi/yaml/auto_delete_api_v0_commands_copy_direct_6443b6.yaml`, "Cancel
        Direct Copy", x-rateLimit 3.5; the CLI's `cancel copy DST`, which cancels every copy
        into DST). Answered `{"success": true}` once the cancel is sent; `success` false (or
        the documented 400 `invalid_args`, "Invalid dst_id." or "Remote instance does not
        have an open port") is a refusal, ApiError. Asking twice cancels nothing twice, so it
        is retried like any idempotent call."""
        body = {"client_id": "me", "dst_id": str(int(dst_id))}
        data = await self._request(
            "DELETE", "/api/v0/commands/copy_direct/", kind="copy", body=body
        )
        if isinstance(data, dict) and data.get("success") is False:
            raise ApiError(400, str(data.get("error") or "cancel_refused"), str(data.get("msg")))

    async def destroy_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        """Destroy; `existed` is False when it was already gone (which counts as done)."""
        return await self._act("DELETE", self._instance_path(instance_id), {}, "destroy", on_try)
