"""A second, minimal marketplace: one account held in memory, for the engine's unit tests, whose
clock, offers, instances and failures its owner controls. It keeps the protocol's contract and
nothing of Vast's: the engine runs on it unchanged, which shows the `Market` seam holds."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ...core.models import Instance, Offer
from ...core.worth.price_increase import PriceIncrease
from ..errors import Acted, CreateResult, NotFound, OnTry
from ..protocol import PAGE, Capabilities, ListFilter


@dataclass
class Box:
    """One instance as the fake market holds it."""

    id: int
    offer: Offer
    label: str | None
    image: str
    created_at: float
    actual: str | None = "loading"
    intended: str = "running"
    msg: str | None = "Pulling fs layer"
    gpu_util: float | None = None
    ssh_host: str | None = "127.0.0.1"
    ssh_port: int | None = 9  # nothing listens: an SSH try fails at once
    uptime_mins: float | None = None  # how long the container has run, as the row says
    bid: float | None = None  # the interruptible tier's bid (None: on-demand)
    bid_floor: float | None = None  # what the row says is the bid to beat now
    end_date: float | None = None

    def row(self) -> Instance:
        return Instance(
            id=self.id,
            machine_id=self.offer.machine_id,
            host_id=self.offer.host_id,
            label=self.label,
            status=self.actual,
            target_state=self.intended,
            status_msg=self.msg,
            start_date=self.created_at,
            gpu_name=self.offer.gpu_name,
            num_gpus=self.offer.num_gpus,
            gpu_dph=self.offer.gpu_dph if self.bid is None else self.bid,  # billed at the bid
            dph_total=self.offer.dph_total,
            storage_total_cost=0.01,
            gpu_util=self.gpu_util,
            ssh_host=self.ssh_host,
            ssh_port=self.ssh_port,
            image=self.image,
            uptime_mins=self.uptime_mins,
            bid_floor=self.bid_floor,
            end_date=self.end_date,
            interruptible=self.bid is not None,
        )


class MemoryMarket:
    """Implements `rentwatch.market.protocol.Market`. Move `t` to move the market's clock."""

    caps = Capabilities(bids=True, copies=True)
    base_url = "memory:"
    time_scale = 1e6  # wall waits collapse to their floors
    gpu_billing = "running"

    def __init__(self, offers: list[Offer] | None = None, t: float = 1_000_000.0) -> None:
        self.t = t
        self.offers = list(offers or [])
        self.boxes: dict[int, Box] = {}
        self.next_id = 5001
        self.fail: dict[str, Exception] = {}  # method name -> raised on its next call
        self.hidden: set[int] = set()  # left out of list answers
        self.denied: set[int] = set()  # asked for directly, said to exist no more (a lie)
        self.calls: list[tuple[str, Any]] = []
        self.bid_gpus: dict[int, int] = {}
        self.keys: list[str] = []
        self.attached: dict[int, list[str]] = {}  # instance id -> keys attached to it
        self.lie_create_id: int | None = None  # the next create answers with this id instead
        self.bad_rows: dict[int, dict[str, Any]] = {}  # instance id -> fields its row garbles
        # the next bid creates: rented on-demand instead (a create that lost its bid price),
        # or held at this bid instead of the one sent
        self.rents_on_demand = False
        self.holds_bid_at: float | None = None
        # hosts' price increases pending on our rentals, and our answers (pending id -> accept)
        self.increases: list[PriceIncrease] = []
        self.answers: dict[int, bool] = {}

    # -- clock ---------------------------------------------------------------------------
    def now(self) -> float:
        return self.t

    def answered_at(self) -> float:
        return self.t

    def _call(self, name: str, arg: Any = None) -> None:
        self.calls.append((name, arg))
        exc = self.fail.pop(name, None)
        if exc is not None:
            raise exc

    # -- the protocol ----------------------------------------------------------------------
    @contextlib.contextmanager
    def polling(self) -> Iterator[None]:
        yield  # every call answers at once: nothing to bound

    def unread_rows(self) -> tuple[int, list[tuple[int | None, str]]]:
        return 0, []  # its rows are typed already: none is unreadable

    async def sync_clock(self) -> float:
        return self.t

    async def list_page(
        self,
        where: ListFilter | None = None,
        after_token: str | None = None,
        page_size: int = PAGE,
    ) -> tuple[list[Instance], str | None]:
        raise NotImplementedError("the in-memory market lists all at once (caps.paging is off)")

    async def charges(self, start: float, end: float) -> list[dict[str, Any]]:
        raise NotImplementedError("the in-memory market keeps no bill (caps.charges is off)")

    async def search_offers(
        self,
        query: dict[str, Any],
        *,
        limit: int | None = 200,
        storage_gb: float = 10.0,
        rental: str = "on-demand",
    ) -> list[Offer]:
        self._call("search_offers", query)
        rented = {b.offer.id for b in self.boxes.values() if b.intended != "destroyed"}
        if rental == "interruptible":  # the bid tier: offers with a bid_floor, priced at it
            return [
                replace(o, dph_total=o.bid_floor)
                for o in self.offers
                if o.id not in rented and o.bid_floor is not None
            ][:limit]
        return [o for o in self.offers if o.id not in rented][:limit]

    async def attach_ssh_key(self, instance_id: int, public_key: str) -> None:
        self._call("attach_ssh_key", instance_id)
        self.attached.setdefault(instance_id, []).append(public_key)

    async def instance_ssh_keys(self, instance_id: int) -> list[str]:
        self._call("instance_ssh_keys", instance_id)
        return list(self.attached.get(instance_id, []))

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
        self._call("create_instance", offer_id)
        o = next(o for o in self.offers if o.id == offer_id)
        held = None if self.rents_on_demand else (self.holds_bid_at or price)
        box = Box(self.next_id, o, label, image, self.t, bid=price if price is None else held)
        self.boxes[box.id] = box
        self.next_id += 1
        lie, self.lie_create_id = self.lie_create_id, None
        if price is not None and o.bid_floor is not None and price < o.bid_floor:
            box.actual, box.intended, box.msg = "stopped", "stopped", "bid under bid_floor"
            return CreateResult(box.id, label or "", refused="bid under bid_floor")
        return CreateResult(box.id if lie is None else lie, label or "")

    async def change_bid(self, instance_id: int, price: float | None, num_gpus: int = 1) -> None:
        self._call("change_bid", (instance_id, price))
        self.bid_gpus[instance_id] = num_gpus  # the GPUs the client caps the price by
        b = self.boxes.get(instance_id)
        if b is None or b.intended == "destroyed":
            raise NotFound(404, "no_such_instance", "Instance with that ID does not exist.")
        b.bid = price

    async def copy_between(self, src_id: int, src_path: str, dst_id: int, dst_path: str) -> None:
        self._call("copy_between", (src_id, src_path, dst_id, dst_path))
        if any(self.boxes.get(i) is None for i in (src_id, dst_id)):
            raise NotFound(404, "no_such_user", "No such user.")

    async def cancel_copies_to(self, dst_id: int) -> None:
        self._call("cancel_copies_to", (dst_id,))

    async def pending_price_increases(self) -> list[PriceIncrease]:
        self._call("pending_price_increases")
        return [p for p in self.increases if p.pending_id not in self.answers]

    async def answer_price_increase(self, pending_id: int, accept: bool) -> bool:
        self._call("answer_price_increase", (pending_id, accept))
        if pending_id in self.answers or all(p.pending_id != pending_id for p in self.increases):
            return False
        self.answers[pending_id] = accept
        return True

    def outbid(self, iid: int, bid_floor: float) -> None:
        """The market stops a bid rental for a higher bid: stopped in every state field, as
        dstack reads an outbid, with the machine's bid_floor now over the bid."""
        self.set(iid, actual="stopped", intended="stopped", msg=None, bid_floor=bid_floor)

    async def list_instances(self) -> list[Instance]:
        self._call("list_instances")
        return [
            replace(b.row(), **self.bad_rows.get(b.id, {}))
            for b in self.boxes.values()
            if b.intended != "destroyed" and b.id not in self.hidden
        ]

    async def show_instance(self, instance_id: int) -> Instance | None:
        self._call("show_instance", instance_id)
        b = self.boxes.get(instance_id)
        if b is None or b.intended == "destroyed" or instance_id in self.denied:
            return None
        return b.row()

    async def _change(self, name: str, iid: int, on_try: OnTry | None, to: str) -> Acted:
        if on_try is not None:
            on_try(self.t, None)
        self._call(name, iid)
        b = self.boxes.get(iid)
        if b is None or b.intended == "destroyed":
            if name == "destroy_instance":
                return Acted(self.t, existed=False)
            raise NotFound(404, "no_such_instance", f"instance {iid} not found")
        b.intended = to
        b.actual = {"running": "loading", "stopped": "stopped"}.get(to, b.actual)
        return Acted(self.t)

    async def stop_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        return await self._change("stop_instance", instance_id, on_try, "stopped")

    async def start_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        return await self._change("start_instance", instance_id, on_try, "running")

    async def destroy_instance(self, instance_id: int, on_try: OnTry | None = None) -> Acted:
        return await self._change("destroy_instance", instance_id, on_try, "destroyed")

    async def request_logs(self, instance_id: int, tail: int = 200) -> str:
        self._call("request_logs", instance_id)
        return ""

    async def add_ssh_key(self, public_key: str) -> None:
        self._call("add_ssh_key")
        self.keys.append(public_key)

    async def aclose(self) -> None:
        self.calls.append(("aclose", None))

    # -- test controls ---------------------------------------------------------------------
    def set(self, iid: int, **changes: Any) -> None:
        """Change what the market says about an instance (status, msg, gpu_util, ...)."""
        box = self.boxes[iid]
        for k, v in changes.items():
            setattr(box, k, v)

    def adopt(self, label: str, o: Offer, **changes: Any) -> int:
        """An instance already there (a crashed controller's), with `label`."""
        box = replace(Box(self.next_id, o, label, "img", self.t - 600), **changes)
        self.boxes[box.id] = box
        self.next_id += 1
        return box.id


if TYPE_CHECKING:  # mypy holds it to the protocol, as it holds the Vast client
    from ..protocol import Market

    _IS_A_MARKET: Market = MemoryMarket()
