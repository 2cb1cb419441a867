"""The marketplace as the supervisor sees it: a small protocol, and the clock it runs on.

A market plugs in by implementing `Market` (`VastClient`, `MemoryMarket`) and declares what it
can do beyond the common calls in `caps`, which the engine reads, never the market's type. Every
method may raise the errors of `errors.py`."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.models import Instance, Offer
from ..core.worth.price_increase import PriceIncrease
from .errors import Acted, CreateResult, OnTry


class Clock(Protocol):
    """Market time, injected into everything that dates an event (no module reads time itself):
    `now()` as best known; `answered_at()` the time stamped on the last answer."""

    def now(self) -> float: ...

    def answered_at(self) -> float: ...


PAGE = 25  # rows per list page (Vast's documented maximum)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a market can do beyond the calls every market answers."""

    paging: bool = False  # `list_page`: one filtered page of the list at a time
    bids: bool = False  # an interruptible tier: searched by tier, rented at a bid, `change_bid`
    copies: bool = False  # `copy_between` / `cancel_copies_to`: data moved between rentals
    market_clock: bool = False  # a clock of its own to read (`sync_clock`): a simulator's
    charges: bool = False  # `charges`: the market's own bill, per rental


@dataclass(frozen=True, slots=True)
class ListFilter:
    """Which rentals one list page is about: those with one of `labels`, or in one of
    `statuses` (the engine's `Status` words); None: not filtered on that."""

    labels: Sequence[str] | None = None
    statuses: Sequence[str] | None = None


class SharedClock(Protocol):
    """A market clock read in-process (`sim.clock.SimClock`); `held()` is entered for each exchange
    with the market, `waited_on()` for each wait on its time."""

    @property
    def time_scale(self) -> float: ...

    def now(self) -> float: ...

    def held(self, subject: object = None) -> AbstractAsyncContextManager[None]: ...

    def waited_on(self) -> AbstractContextManager[None]: ...


class Market(Clock, Protocol):
    """One account on one GPU marketplace. Every call may raise the errors in the module doc."""

    caps: Capabilities
    base_url: str  # where the market answers: recorded as the ledger's market
    time_scale: float  # market seconds per wall second (1 on a real market)
    gpu_billing: str  # "running" (Vast's documented rule) or "created"

    def polling(self) -> AbstractContextManager[Any]:
        """The bound on a poll's own calls: inside it, a market may give up on a list or show
        call after a try or two, since the next poll retries it anyway."""
        ...

    def unread_rows(self) -> tuple[int, list[tuple[int | None, str]]]:
        """Rows the client could not read: how many so far, and the latest (id, problem)."""
        ...

    async def sync_clock(self) -> float:
        """Read the market's own clock where it has one (`caps.market_clock`); market time."""
        ...

    async def list_page(
        self,
        where: ListFilter | None = None,
        after_token: str | None = None,
        page_size: int = PAGE,
    ) -> tuple[list[Instance], str | None]:
        """One page of the list (by id) and the next token (None: the last); `caps.paging` only."""
        ...

    async def charges(self, start: float, end: float) -> list[dict[str, Any]]:
        """The market's own charges between two epoch times (only where `caps.charges`)."""
        ...

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
        """Rent an offer (with `price`: a bid on the interruptible tier). The label is unique, so a
        create whose answer was lost is found by it; raises when the create did not happen. A bid
        too low still makes a stopped instance: the result names it, `refused` set."""
        ...

    async def change_bid(self, instance_id: int, price: float | None, num_gpus: int = 1) -> None:
        """Change a bid rental's bid: the machine's $/h for all its GPUs, or None: a winning bid."""
        ...

    async def copy_between(self, src_id: int, src_path: str, dst_id: int, dst_path: str) -> None:
        """Ask the market to copy `src_path` off one of our instances (a stopped one too: its
        disk is kept) to `dst_path` on another. Returns once asked; the data lands later."""
        ...

    async def cancel_copies_to(self, dst_id: int) -> None:
        """Cancel every copy under way into one of our instances (a rescue that gave up on
        one). Returns once the market has the cancel; a copy may still be landing."""
        ...

    async def pending_price_increases(self) -> list[PriceIncrease]:
        """The price increases pending on the account's rentals (unreadable rows skipped)."""
        ...

    async def answer_price_increase(self, pending_id: int, accept: bool) -> bool:
        """Accept or reject one pending increase; False when it is no longer pending."""
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


def wall_seconds(market_seconds: float, time_scale: float, floor: float) -> float:
    """Wall seconds to wait for `market_seconds` of market time, never under `floor`."""
    return max(floor, market_seconds / max(time_scale, 1e-9))
