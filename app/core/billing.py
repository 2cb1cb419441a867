"""What a rental costs: one pure function used by the simulator, the ledger views and the TUI.

Per Vast's billing guide and FAQ: storage bills per second from create to destroy except while
offline; GPU time bills per `running` (only while the container runs) or `created` (a what-if);
bandwidth bills per byte as one-off `bandwidth` marks. A held instance whose row cannot be read
(`unread` to `read`) is billed its worst case: online, its GPU running at its last price."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

GpuBilling = Literal["created", "running"]


@dataclass(frozen=True, slots=True)
class Charges:
    gpu_usd: float
    storage_usd: float
    bandwidth_usd: float = 0.0

    @property
    def total_usd(self) -> float:
        return self.gpu_usd + self.storage_usd + self.bandwidth_usd


@dataclass(frozen=True, slots=True)
class Mark:
    """A change that matters to billing at market time `at`: create, running, halt, offline, online,
    stop, start, resume (an outbid bid rental running again), destroy, price, bandwidth (`usd`
    is its price), unread (its row unreadable from here: billed online and running whatever it
    last showed) or read (read well again). Prices are $/h from this mark on (None keeps the last)."""

    at: float
    kind: str
    gpu_dph: float | None = None
    storage_dph: float | None = None
    usd: float = 0.0


def status_marks(at: float, status: str | None) -> list[Mark]:
    """The billing marks a status the market showed implies, as the `billing_marks` view reads them:
    offline bills nothing; `stopped` changes nothing (a dark stopped host shows it too); any
    other status is the host online, running or not."""
    if status is None or status == "stopped":
        return []
    if status == "offline":
        return [Mark(at, "offline")]
    if status in ("running", "frozen"):  # frozen: "GPU charges apply" (Vast's show-instance)
        return [Mark(at, "online"), Mark(at, "running")]
    if status in ("exited", "unknown"):
        return [Mark(at, "online"), Mark(at, "halt")]
    return [Mark(at, "online")]


# The ledger's events that are billing marks besides `create` and `status`, as the
# `billing_marks` view reads them: a resume bills the GPU again (Vast's rental-types page), a
# rebid's price from then, an accepted increase's from its contract's end date (vast-cli PR
# #401: "the new rate applies only after each contract's current end_date")
EVENT_MARKS = {
    "stop": "stop",
    "start": "start",
    "resumed": "resume",
    "rebid": "price",
    "price": "price",
    "unread": "unread",
    "read_again": "read",
}


def price_of(value: object) -> float | None:
    """A rebid's (or a price's) `detail.price` as the ledger's view reads it (`TRY_CAST` of its text, finite
    and not negative): a number, or a number's text; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        price = float(str(value))
    except ValueError:
        return None
    return price if math.isfinite(price) and price >= 0 else None


def event_mark(at: float, kind: str, detail: dict[str, object]) -> Mark | None:
    """The billing mark a settled ledger event of `kind` implies (None: it implies none)."""
    mark = EVENT_MARKS.get(kind)
    if mark == "price":
        price = price_of(detail.get("price"))
        return Mark(at, mark, gpu_dph=price) if price is not None else None
    return Mark(at, mark) if mark is not None else None


def found_at(kind: str, marks: Sequence[Mark], since: float, now: float) -> float:
    """When a stop or start found at a restart is dated, so the GPU time in between bills never
    less: a stop now; a start at the running status seen since, else at `since` (a bid rental
    that resumed while the controller was down billed from the restart: 30 min missed)."""
    if kind != "start":
        return now
    ran = next((m.at for m in reversed(marks) if m.kind == "running"), None)
    at = ran if ran is not None and ran >= since else since
    return min(now, max(at, marks[-1].at if marks else at))  # the marks stay in time order


def storage_per_hour(disk_gb: float, storage_cost_gb_month: float) -> float:
    """Vast quotes storage in $/GB/month; a month is 30 days there."""
    return disk_gb * storage_cost_gb_month / (30 * 24)


# what each mark says of the instance from then on (created and not destroyed: it bills; held:
# not stopped by the renter; running: its container runs; online: the docs bill nothing while
# offline; unread: its row unreadable, billed online and running, the worst case)
EFFECTS: dict[str, dict[str, bool]] = {
    "create": {"created": True, "held": True, "running": False, "online": True},
    "running": {"running": True},
    "halt": {"running": False},
    "offline": {"running": False, "online": False},
    "online": {"online": True},
    "stop": {"held": False, "running": False},
    "start": {"held": True, "online": True},
    "resume": {"held": True, "running": True, "online": True},
    "destroy": {"destroyed": True},
    "unread": {"unread": True},
    "read": {"unread": False},
}


def charges(marks: Sequence[Mark] | Iterable[Mark], mode: GpuBilling, now: float) -> Charges:
    """Charges up to `now` for one instance from its billing marks (in time order)."""
    gpu = storage = bandwidth = gpu_dph = storage_dph = 0.0
    state = {"created": False, "destroyed": False, "held": False, "running": False}
    state |= {"online": True, "unread": False}
    bills = gpu_on = False  # whether its storage and its GPU meter run
    last = 0.0
    for m in itertools.chain(marks, [Mark(now, "now")]):  # the last span runs until now
        at = min(m.at, now)
        if bills:
            span = max(0.0, at - last)
            storage += storage_dph * span / 3600
            gpu += gpu_dph * span / 3600 if gpu_on else 0.0
        last = at
        if m.gpu_dph is not None:
            gpu_dph = m.gpu_dph
        if m.storage_dph is not None:
            storage_dph = m.storage_dph
        if m.kind == "bandwidth" and m.at <= now and state["created"]:
            bandwidth += m.usd
        state.update(EFFECTS.get(m.kind, {}))
        bills = state["created"] and not state["destroyed"] and (state["online"] or state["unread"])
        gpu_on = (
            bills and state["held"] and (mode == "created" or state["running"] or state["unread"])
        )
        if m.at >= now:
            break
    return Charges(gpu_usd=gpu, storage_usd=storage, bandwidth_usd=bandwidth)


def took_effect_at(intent_at: float, tries: Sequence[tuple[float, str | None]]) -> float:
    """When a state change took effect, from its tries as they went out: (sent_at, the fate of the
    try before it). A refused try changed nothing; the first try not refused did it (the market
    acts on a request as it arrives). Without tries the intent's time stands."""
    for i, (sent_at, _) in enumerate(tries):
        following = tries[i + 1][1] if i + 1 < len(tries) else None
        if following != "refused":
            return sent_at
    return intent_at
