"""The marketplace as the supervisor sees it: a small protocol, and the clock it runs on.

The supervisor, recovery and the host tender only ever call what `Market` names, so a second
marketplace plugs in by implementing it; `VastClient` (app/market/vast/client.py) is the Vast.ai one and
`tests/fake_market.py` an in-memory one. Simulator-only calls (`sync_clock` reading
`/sim/v0/clock`, the referee's `/sim/v0/truth`) are not part of it: the session does the
former, the referee the latter.

Every method may raise the errors of `errors.py` (the protocol's own vocabulary, which each
marketplace's client raises).
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ..core.models import Instance, Offer
from .errors import Acted, CreateResult, OnTry


class Clock(Protocol):
    """Market time, injected into everything that dates an event (no module reads time itself).

    `now()` is the market's clock as best known; `answered_at()` the market time stamped on
    the last answer (what a poll's observations are dated to)."""

    def now(self) -> float: ...

    def answered_at(self) -> float: ...


class Market(Clock, Protocol):
    """One account on one GPU marketplace. Every call may raise the errors in the module doc."""

    time_scale: float  # market seconds per wall second (1 on a real market)
    gpu_billing: str  # "running" (Vast's documented rule) or "created"

    async def search_offers(
        self,
        query: dict[str, Any],
        *,
        limit: int | None = 200,
        storage_gb: float = 10.0,
        rental: str = "on-demand",
    ) -> list[Offer]:
        """Offers matching the query (the official CLI's query dict), of one tier: `rental`
        "interruptible" lists the bid tier (each offer's `bid_floor` the bid to beat)."""
        ...

    async def create_instance(
        self,
        offer_id: int,
        *,
        image: str,
        disk_gb: float,
        label: str | None = None,
        exact_label: bool = False,
        onstart: str | None = None,
        price: float | None = None,
    ) -> CreateResult:
        """Rent an offer (with `price`: on the interruptible tier at that bid). The label is
        unique, so a create whose answer was lost is found by it (the result says so); raises
        when the create did not happen. A bid too low still makes an instance, created
        stopped: the result names it, with `refused` set."""
        ...

    async def change_bid(self, instance_id: int, price: float) -> None:
        """Change an interruptible rental's bid ($/h)."""
        ...

    async def copy_between(self, src_id: int, src_path: str, dst_id: int, dst_path: str) -> None:
        """Ask the market to copy `src_path` off one of our instances (a stopped one too: its
        disk is kept) to `dst_path` on another. Returns once asked; the data lands later."""
        ...

    async def cancel_copies_to(self, dst_id: int) -> None:
        """Cancel every copy under way into one of our instances (a rescue that gave up on
        one). Returns once the market has the cancel; a copy may still be landing."""
        ...

    async def list_instances(self) -> list[Instance]:
        """Every instance of the account (all pages), one poll's worth."""
        ...

    async def show_instance(self, instance_id: int) -> Instance | None:
        """One instance; None when the market says it no longer exists."""
        ...

    async def stop_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted: ...

    async def start_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted: ...

    async def destroy_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        """Stop, start, destroy: `on_try(at, previous_failure)` is called as each try leaves,
        so the ledger can date a change a crash cut short; `Acted` says when it took effect."""
        ...

    async def request_logs(self, instance_id: int, tail: int = 200) -> str: ...

    async def attach_ssh_key(self, instance_id: int, public_key: str) -> None:
        """Attach a key to one existing instance (account keys reach new instances only)."""
        ...

    async def instance_ssh_keys(self, instance_id: int) -> list[str]:
        """The public keys one instance accepts."""
        ...

    async def add_ssh_key(self, public_key: str) -> None:
        """Register the controller's public key with the account (idempotent)."""
        ...

    async def aclose(self) -> None: ...


def polling(market: object) -> AbstractContextManager[Any]:
    """The bound on a poll's own calls: inside it, a market that can (`VastClient.polling`)
    gives up on a list or show call after a try or two, since the next poll retries it
    anyway; a market without it calls as usual."""
    bound = getattr(market, "polling", None)
    return bound() if callable(bound) else contextlib.nullcontext()


def wall_seconds(market_seconds: float, time_scale: float, floor: float) -> float:
    """Wall seconds to wait for `market_seconds` of market time, never under `floor`."""
    return max(floor, market_seconds / max(time_scale, 1e-9))
