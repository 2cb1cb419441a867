"""Changes to an instance that already exists: stop, start, relabel and destroy, each said again
until the market confirms it and dated to when it took effect, and a new bid price."""

from __future__ import annotations

from typing import Any

from ...core.errors import MalformedAnswer
from ..errors import Acted, AnswerLost, ApiError, NotFound, OnTry
from .transport import Again, Transport, cures


class StateChanges(Transport):
    """The state-change calls `VastClient` inherits, each over the paced transport."""

    async def _act(
        self, method: str, instance_id: int, body: dict[str, Any], kind: str, on_try: OnTry | None
    ) -> Acted:
        """Say a state change until the market confirms it, and work out when it took effect.

        A garbled 2xx means the market acted. A market acts on a request as it arrives, so a
        change a later try confirms is dated to the first unanswered try, and the ledger bills
        what the market bills. `on_try(sent_at, previous)` hears each try as it goes out, so the
        change can be dated even if this process dies waiting (Supervisor.reconcile)."""
        path = f"/api/v0/instances/{int(instance_id)}/"
        first_unanswered: float | None = None
        previous: str | None = None
        sent_at = self.now()

        def going() -> None:
            nonlocal sent_at
            sent_at = self.now()
            if on_try is not None:
                on_try(sent_at, previous)

        async def one_try() -> Acted:
            nonlocal first_unanswered, previous
            try:
                await self._once(method, path, kind=kind, body=body, on_send=going)
            except MalformedAnswer:
                pass
            except NotFound:
                if first_unanswered is None:  # else our own lost try did it
                    if method != "DELETE":
                        raise
                    return Acted(self.answered_at(), existed=False)
            except (AnswerLost, ApiError) as exc:
                if not cures(exc):
                    raise
                lost = isinstance(exc, AnswerLost)
                previous = "lost" if lost else "refused"
                if lost and first_unanswered is None:
                    first_unanswered = sent_at
                raise Again(exc) from None
            if first_unanswered is None:
                return Acted(self.answered_at())
            return Acted(first_unanswered, answer_lost=True)

        return await self._retried(one_try, self.max_attempts, f"{method} {path}")

    async def stop_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        return await self._act("PUT", instance_id, {"state": "stopped"}, "manage", on_try)

    async def start_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        return await self._act("PUT", instance_id, {"state": "running"}, "manage", on_try)

    async def change_bid(self, instance_id: int, price: float | None, num_gpus: int = 1) -> None:
        """`PUT /api/v0/instances/bid_price/{id}/` (openapi.yaml change bid; the CLI's `change
        bid`). P is the machine's price, all its GPUs, from $0.001/h to 32.0 x its GPUs
        (`change_bid.yaml`); None sends `"price": null`: "a winning bid price". Raises NotFound
        for an instance gone, ApiError for a refused price."""
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
        """`PUT /api/v0/commands/copy_direct/` (vast-ai/docs `copy.yaml`; the CLI's `copy`):
        `success` false is a refusal (ApiError 400) with the market's `msg`. Not idempotent (each
        ask bills a transfer), so only a 429 is asked again; a lost answer or a 5xx is raised
        after one try, as a copy that may be under way."""
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
        await self._request(
            "PUT", "/api/v0/commands/copy_direct/", kind="copy", body=body, idempotent=False
        )

    async def cancel_copies_to(self, dst_id: int) -> None:
        """`DELETE /api/v0/commands/copy_direct/` (vast-ai/docs
        `auto_delete_api_v0_commands_copy_direct_6443b6.yaml`; the CLI's `cancel copy DST`):
        cancels every copy into `dst_id`; `success` false or a 400 is a refusal, ApiError.
        Idempotent, so retried like any idempotent call."""
        body = {"client_id": "me", "dst_id": str(int(dst_id))}
        await self._request("DELETE", "/api/v0/commands/copy_direct/", kind="copy", body=body)

    async def destroy_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        return await self._act("DELETE", instance_id, {}, "destroy", on_try)
