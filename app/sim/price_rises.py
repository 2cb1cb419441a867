"""Hosts that raise their price under a held rental, through Vast's pending flow (docs/fidelity.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .machines import keyed_rng
from .rental import SimInstance
from .scenario import PriceRise

NEW_TERM_S = 30 * 86400.0  # the host's new end date, past the old one, when it had none later


@dataclass
class Pending:
    """One pending row, as `_serialize_pending_row` gives it (per-second GPU prices, per GPU:
    the CLI shows them as "$/GPU/hr"). `old_dph` and `new_dph` are the machine's, all its GPUs."""

    id: int
    instance: SimInstance
    old_dph: float
    new_dph: float
    contract_end: float
    ask_end: float
    created_at: float
    status: str = "pending"  # accepted, rejected, expired (unanswered at its end), applied
    relisted: bool = False  # its rental is gone: the host's listing runs to `ask_end` again

    def row(self) -> dict[str, Any]:
        gpus = self.instance.machine.num_gpus
        return {
            "pending_price_increase_id": self.id,
            "contract_id": self.instance.id,
            "host_id": self.instance.machine.host_id,
            "new_gpu_costpersec": self.new_dph / gpus / 3600,
            "old_gpu_costpersec": self.old_dph / gpus / 3600,
            # null: the host did not change them
            **{f"{age}_{k}": None for age in ("new", "old") for k in UNCHANGED},
            "contract_end_date": self.contract_end,
            "ask_end_date": self.ask_end,
            "created_at": self.created_at,
        }


# the row's prices besides the GPU's (a rise here changes only the GPU's)
UNCHANGED = ("disk_ram_costpersec", "bwu_cost", "bwd_cost", "platform_fee")


class PriceRises:
    def __init__(self, seed: int, table: PriceRise) -> None:
        self.seed = seed
        self.table = table
        self.rows: dict[int, Pending] = {}
        self._planned: dict[int, float | None] = {}  # instance id -> when its host raises
        self._next_id = 700_001

    def _plan(self, inst: SimInstance) -> float | None:
        if inst.id not in self._planned:
            rng = keyed_rng(self.seed, "price_rise", inst.machine.id, inst.rental_no)
            hit = inst.bid is None and rng.random() < self.table.share
            self._planned[inst.id] = (
                inst.created_at + rng.uniform(*self.table.after_min) * 60 if hit else None
            )
        return self._planned[inst.id]

    def settle(self, instances: list[SimInstance], now: float) -> None:
        """Rises due by `now` become pending rows; rows whose end date passed are settled:
        an accepted one bills its new price from that date and extends the contract."""
        for inst in instances:
            at = self._plan(inst)
            if at is None or at > now or inst.destroyed_at is not None and inst.destroyed_at <= at:
                continue
            self._planned[inst.id] = None
            rng = keyed_rng(self.seed, "price_rise_terms", inst.machine.id, inst.rental_no)
            factor, notice_s = rng.uniform(*self.table.factor), rng.uniform(*self.table.notice_min)
            self.raise_now(inst, at, factor, notice_s * 60)
        for p in self.rows.values():
            if p.status in ("pending", "accepted", "rejected") and now >= p.contract_end:
                self._cutover(p)
            gone = p.instance.destroyed_at is not None and p.instance.destroyed_at <= now
            if gone and not p.relisted:
                # the held contract ended with its rental; the host's listing goes on to its
                # new end date for the next renter, as before the rise
                p.relisted = True
                m = p.instance.machine
                m.contract_end = max(m.contract_end or p.ask_end, p.ask_end)

    def raise_now(
        self, inst: SimInstance, at: float, factor: float, notice_s: float
    ) -> Pending | None:
        """The host raises the held contract's GPU price by `factor`, to apply `notice_s` from
        `at` (None: the contract ends before that, or a rise is already pending on it)."""
        m = inst.machine
        old = inst.gpu_dph
        new = round(old * factor, 6)
        end = at + notice_s
        if m.contract_end is not None and m.contract_end <= end:
            return None  # the contract ends before the notice would: no rise to bargain over
        if any(
            p.instance is inst and p.status in ("pending", "accepted") for p in self.rows.values()
        ):
            return None
        ask_end = m.contract_end if m.contract_end is not None else end + NEW_TERM_S
        m.contract_end = end  # the held contract's current end date
        pid, self._next_id = self._next_id, self._next_id + 1
        self.rows[pid] = Pending(pid, inst, old, new, end, ask_end, at)
        return self.rows[pid]

    def _cutover(self, p: Pending) -> None:
        inst, m = p.instance, p.instance.machine
        kept = (
            p.status != "accepted"
            and keyed_rng(self.seed, "price_rise_kept", p.id).random() < self.table.keep_old
        )
        if p.status == "accepted":
            inst.prices.append((p.contract_end, p.new_dph))
            m.contract_end = p.ask_end
            p.status = "applied"
        elif kept:  # the unknown: it runs on at the old price
            m.contract_end = p.ask_end
            p.status = "kept" if p.status == "rejected" else "expired"
        else:  # the contract ends at its end date (market.market_stops)
            p.status = "ended" if p.status == "rejected" else "expired"

    def pending_for(self, owner: list[SimInstance]) -> list[Pending]:
        ids = {i.id for i in owner if i.destroyed_at is None}
        return [p for p in self.rows.values() if p.status == "pending" and p.instance.id in ids]

    def answer(self, pid: int, accept: bool) -> Pending | None:
        p = self.rows.get(pid)
        if p is None or p.status != "pending" or p.instance.destroyed_at is not None:
            return None
        p.status = "accepted" if accept else "rejected"
        return p
