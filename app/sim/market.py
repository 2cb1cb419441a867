"""The market model: machines, instances and their boots, billing truth, on one `SimClock`."""

from __future__ import annotations

import random
import secrets
import time
from typing import Any

from ..core.billing import storage_per_hour
from . import bids, churn
from .clock import SimClock
from .copies import Copy
from .images import image_facts
from .machines import Machine, build_machines, keyed_rng, nvml_name, other_listings, vram_mb
from .price_rises import PriceRises
from .probe_answers import gpu_vitals, xid_at
from .rental import THROTTLE_REASONS, SimInstance, boot_steps
from .scenario import Scenario
from .truth import truth_row
from .work_meter import WorkMeter, advance

_ID_EPOCH = 1_735_689_600.0  # 2025-01-01T00:00:00Z
_highest_id = 0  # the highest instance id any market in this process handed out
# an expired contract's instance is deleted this long after the contract's end ("Expired
# instances may be deleted 48 hours after expiration", vast-ai/docs manage-instances.mdx)
EXPIRED_DELETE_S = 48 * 3600.0


class SimMarket:
    def __init__(
        self,
        scenario: Scenario,
        clock: SimClock | None = None,
        api_key: str | None = None,
        id_base: int | None = None,
    ) -> None:
        self.scenario = scenario
        self.clock = clock or SimClock(scenario.time_scale)
        self.api_key = api_key or secrets.token_hex(16)
        self.machines: list[Machine] = build_machines(scenario, self.clock.now)
        # the listings the CLI's default search leaves out (`[listing]`), rentable all the same
        self.others: list[Machine] = other_listings(scenario, self.clock.now)
        self.by_offer = churn.index(scenario.seed, scenario.churn, self.machines + self.others)
        self.instances: dict[int, SimInstance] = {}
        self.order: list[int] = []  # instance ids in creation order, which is id order
        self.ssh_keys: list[dict[str, Any]] = []
        self._next_instance = self._first_id(id_base)
        self._instance_keys: dict[str, int] = {}
        self.meters: list[WorkMeter] = []  # every sized job launched, in launch order
        self.copies: list[Copy] = []  # instance to instance copies asked (sim/copies.py)
        self.rises = PriceRises(scenario.seed, scenario.price_rise)  # hosts' price increases
        self._preload()

    def _first_id(self, id_base: int | None) -> int:
        """Where this run's ids start: from the wall clock, so that ids never restart across runs,
        as on the real market; the gaps between them from the seed."""
        global _highest_id
        if id_base is None:
            id_base = 10_000_000 + int((time.time() - _ID_EPOCH) * 100)
            id_base = max(id_base, _highest_id + 1)
        return id_base + keyed_rng(self.scenario.seed, "ids").randrange(0, 10)

    def rented_machines(self) -> set[int]:
        return {i.machine.id for i in self.instances.values() if i.destroyed_at is None}

    def offers(self, now: float) -> list[Machine]:
        busy = self.rented_machines()
        return [
            m
            for m in self.machines + self.others
            if m.id not in busy and not self.taken(m, now) and self.listed(m, now)
        ]

    def listed(self, m: Machine, now: float) -> bool:
        return churn.listed(self.scenario.seed, self.scenario.churn, m, now)

    def offer_id(self, m: Machine, now: float) -> int:
        return churn.offer_id_at(self.scenario.seed, self.scenario.churn, m, now)

    def rentable(self, offer_id: int, now: float) -> Machine | None:
        """The machine an offer id names, if a create on it can succeed at `now`: listed under
        that very id, and neither rented nor taken by another renter."""
        m = self.by_offer.get(offer_id)
        if m is None or m.id in self.rented_machines() or self.taken(m, now):
            return None
        return m if self.listed(m, now) and self.offer_id(m, now) == offer_id else None

    @staticmethod
    def taken(m: Machine, now: float) -> bool:
        """Another renter holds the machine (its offer is gone from the search meanwhile)."""
        return m.taken_until is not None and now < m.taken_until

    def taken_meanwhile(self, m: Machine, now: float) -> bool:
        """Whether another renter took this offer between the search and this create at `now`
        (the `[listing] taken` share of creates): if so it holds the machine for a while."""
        m.asked += 1
        rng = keyed_rng(self.scenario.seed, "taken", m.id, m.asked)
        if rng.random() >= self.scenario.listing.taken:
            return False
        m.taken_until = now + rng.uniform(30, 180) * 60
        return True

    def create(
        self,
        offer_id: int,
        image: str,
        disk_gb: float,
        label: str | None,
        env: dict[str, str],
        onstart: str | None,
        at: float | None = None,
        price: float | None = None,
    ) -> SimInstance:
        """Rent an offer; with `price`, on the interruptible tier at that bid: a bid that does
        not win now makes the instance stopped from its create, paused until it wins."""
        global _highest_id
        m = self.by_offer[offer_id]
        now = self.clock.now() if at is None else at
        seed = self.scenario.seed
        m.rentals += 1
        on_demand = keyed_rng(seed, "rents_on_demand", m.id, m.rentals).random()
        if on_demand < self.scenario.bid_rents_on_demand:
            price = None  # asked for a bid, rented on-demand (the scenario's knob)
        iid = self._next_instance
        self._next_instance += 1 + keyed_rng(seed, "gap", m.id, m.rentals).randrange(0, 3)
        _highest_id = max(_highest_id, iid)
        rng = keyed_rng(seed, m.id, m.rentals)
        inst = SimInstance(
            id=iid,
            machine=m,
            image=image,
            disk_gb=disk_gb,
            label=label,
            env=env,
            onstart=onstart,
            created_at=now,
            prices=[(now, m.dph_base)],
            storage_dph=storage_per_hour(disk_gb, m.storage_cost),
            api_key=secrets.token_hex(24),
            rental_no=m.rentals,
            ssh_keys=[k["key"] for k in self.ssh_keys],
            offer_id=offer_id,
        )
        self._boot(inst, now, rng)
        inst.throttle_drop = rng.uniform(*m.knobs["throttle_drop"])
        inst.throttle_reason = rng.choice(THROTTLE_REASONS)
        if price is not None:
            pay = bids.paid(seed, self.scenario.bids, m, now, price)
            inst.bid, inst.prices, inst.bid_seen = price, [(now, pay)], now
            if not bids.wins(seed, self.scenario.bids, m, now, price):
                bids.pause(inst, now, outbid=False)
        self.instances[iid] = inst
        self.order.append(iid)
        self._instance_keys[inst.api_key] = iid
        return inst

    def _preload(self) -> None:
        """The fleet the scenario says the account already rents (see `Scenario.preload`)."""
        n, booting = self.scenario.preload, self.scenario.preload_booting
        now = self.clock.now()
        for i, m in enumerate(self.machines[:n]):
            at = now if i >= n - booting else now - 3600.0
            label = f"{self.scenario.preload_label}:{i}"
            self.create(m.offer_id, "preload", 10.0, label, {}, None, at=at)

    def live_count(self) -> int:
        return len(self._instance_keys)  # a live instance's key, dropped when it is destroyed

    def instance_for_key(self, key: str) -> int | None:
        return self._instance_keys.get(key)

    def live(self, iid: int) -> SimInstance | None:
        inst = self.instances.get(iid)
        return inst if inst is not None and inst.destroyed_at is None else None

    def stop(self, inst: SimInstance, at: float | None = None, inside: bool = False) -> None:
        """`inside`: asked from the instance itself, with its container's key."""
        seg = inst.segments[-1]
        if seg.end is None:
            seg.end = self.clock.now() if at is None else at
            seg.stopped_inside = inside

    def start(self, inst: SimInstance, at: float | None = None, resumed: bool = False) -> None:
        seg = inst.segments[-1]
        if seg.end is None:
            return
        now = self.clock.now() if at is None else at
        if not resumed and inst.bid is not None:
            # a renter's start of a bid rental: it runs only while its bid wins, else it waits
            self.settle_bids(now)
            if not bids.wins(self.scenario.seed, self.scenario.bids, inst.machine, now, inst.bid):
                bids.pause(inst, now, outbid=False)
                return
        n = len(inst.segments)
        rng = keyed_rng(self.scenario.seed, inst.machine.id, inst.rental_no, "start", n)
        self._boot(inst, now, rng, n)

    def _boot(self, inst: SimInstance, now: float, rng: random.Random, *again: int) -> None:
        """A boot of `inst` from `now`, drawn from `rng`: its create's, or (`again` numbering it)
        a start's; the market's unkindness drawn apart."""
        extra = keyed_rng(self.scenario.seed, "states", inst.machine.id, inst.rental_no, *again)
        pulled = any(s.running_at is not None for s in inst.segments)
        pullable = image_facts(inst.image, self.scenario.images).pullable
        m, states = inst.machine, self.scenario.states
        inst.segments.append(boot_steps(rng, m, inst.image, now, pulled, states, extra, pullable))

    def contract_over(self, inst: SimInstance, now: float) -> bool:
        end = inst.machine.contract_end
        return end is not None and now >= end

    def settle_bids(self, now: float) -> None:
        for inst in self.instances.values():
            bids.settle(self.scenario.seed, self.scenario.bids, inst, now, self.start)

    def change_bid(self, inst: SimInstance, price: float, at: float | None = None) -> None:
        """`PUT /api/v0/instances/bid_price/{id}/`: the GPU bills at the new bid from `at`
        (default now), and the rental runs or waits as the new bid wins or not."""
        now = self.clock.now() if at is None else at
        self.settle_bids(now)
        pay = bids.paid(self.scenario.seed, self.scenario.bids, inst.machine, now, price)
        inst.bid = price
        inst.prices.append((now, pay))
        won = bids.wins(self.scenario.seed, self.scenario.bids, inst.machine, now, price)
        if inst.segments[-1].end is None and not won:
            bids.pause(inst, now)
        elif inst.paused_at is not None and won and not self.contract_over(inst, now):
            inst.paused_at = None
            inst.resumes.append(now)
            self.start(inst, at=now, resumed=True)

    def min_bid(self, m: Machine, now: float) -> float:
        return bids.min_bid(self.scenario.seed, self.scenario.bids, m, now)

    def bid_quote(self, m: Machine, now: float) -> float | None:
        return bids.quote(self.scenario.seed, self.scenario.bids, m, now)

    def market_stops(self, now: float) -> None:
        """Stop every rental whose host's contract has ended (Vast stops, it does not destroy, at a
        contract's end date), after settling bids and price rises up to `now`."""
        self.settle_bids(now)
        self.rises.settle(list(self.instances.values()), now)
        for inst in self.instances.values():
            end = inst.machine.contract_end
            if inst.destroyed_at is not None or end is None or now < end:
                continue
            seg = inst.segments[-1]
            if seg.end is None and seg.start < end:
                seg.end = end
                inst.market_stop_at = end
            if now >= end + EXPIRED_DELETE_S:  # "may be deleted 48 hours after expiration"
                inst.expired_at = end + EXPIRED_DELETE_S
                self.destroy(inst, at=inst.expired_at)

    def bill_bytes(self, inst: SimInstance, down: int, up: int) -> None:
        """Bytes moved in a session: the renter's download is the host's upload."""
        m = inst.machine
        into, out = up * m.inet_down_cost / 1e9, down * m.inet_up_cost / 1e9
        if into + out > 0 and inst.destroyed_at is None:
            now = self.clock.now()
            inst.transfers.append((now, into, out))

    def destroy(self, inst: SimInstance, at: float | None = None) -> None:
        if inst.destroyed_at is None:
            inst.destroyed_at = self.clock.now() if at is None else at
            self._instance_keys.pop(inst.api_key, None)

    def add_meter(self, meter: WorkMeter) -> None:
        """A sized job launched: an earlier launch of it on the same host counts no more."""
        for old in self.meters:
            if (old.instance_id, old.job) == (meter.instance_id, meter.job) and old.done_at is None:
                old.superseded = True
        self.meters.append(meter)

    def end_meters(self, instance_id: int) -> None:
        """The instance stopped: its jobs died with their processes and count no more work
        (a start later runs nothing of theirs until they are launched again)."""
        for meter in self.meters:
            if meter.instance_id == instance_id and meter.done_at is None:
                meter.superseded = True

    def advance_work(self, now: float) -> list[WorkMeter]:
        """Count every sized job's work up to `now`; the launches still to release."""
        out = []
        for meter in self.meters:
            inst = self.instances.get(meter.instance_id)
            if inst is None or meter.released:
                continue
            advance(meter, inst, now, xid_at(self.scenario.seed, inst))
            out.append(meter)
        return out

    def gpu_state(self, inst: SimInstance, now: float) -> dict[str, Any]:
        """The facts the on-host probes read, for this instance's machine at `now`."""
        m = inst.machine
        seg = inst.segments[-1]
        throttled = seg.throttle_at is not None and now >= seg.throttle_at
        vram = vram_mb(m.real_gpu)
        busy = now < inst.busy_until
        return {
            "name": nvml_name(m.real_gpu),
            "driver_version": m.driver_version,
            "cuda_version": str(m.cuda_max_good),
            "cuda_works": m.behaviour not in ("stale_driver", "forged_preflight"),
            "tflops": m.real_tflops * (1 - inst.throttle_drop if throttled else 1.0),
            "vram_mb": vram,
            "max_sm_clock": 1950,
            "sm_clock": int(1950 * (1 - inst.throttle_drop))
            if throttled
            else (1950 if busy else 210),
            "throttle_reasons": [inst.throttle_reason]
            if throttled
            else ([] if busy else ["gpu_idle"]),
            "util": 97 if busy else 0,
            **gpu_vitals(
                m.real_gpu,
                vram,
                busy,
                inst.throttle_reason if throttled else None,
                (self.scenario.seed, m.id),
            ),
        }

    def truth(self) -> dict[str, Any]:
        now = self.clock.now()
        self.market_stops(now)
        self.advance_work(now)
        owed = [
            (inst, inst.charges(now, self.scenario.gpu_billing)) for inst in self.instances.values()
        ]
        totals = {
            k: sum((getattr(c, k) for _, c in owed), 0.0)
            for k in ("gpu_usd", "storage_usd", "bandwidth_usd")
        }
        totals["total_usd"] = sum(totals.values())
        return {
            "now": now,
            "scenario": self.scenario.name,
            "seed": self.scenario.seed,
            "gpu_billing": self.scenario.gpu_billing,
            "instances": [truth_row(inst, now, c) for inst, c in owed],
            # sized jobs: each launch's work delivered (reference GPU-hours), and when it was done
            "jobs": [m.row() for m in self.meters],
            "totals": {k: round(v, 6) for k, v in totals.items()},
        }
