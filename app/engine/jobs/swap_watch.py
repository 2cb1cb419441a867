"""The slow clock of each proven host (`core.worth.swap`): once a market minute while sized jobs are
queued, each host in service priced against a fresh create, the clock started, held or cleared by
the rule's hysteresis."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.delivery import WorkOutlook
from ...core.jobs import JobQueue
from ...core.preflight.gpu_specs import expected_tflops
from ...core.worth.swap import Slow, fresh_usd_per_ref_h, keep_usd_per_ref_h, next_slow, swap_due
from ..attempt import Attempt
from ..fleet import Fleet

if TYPE_CHECKING:
    from ..offers import OfferBook

LOOK_EVERY_S = 60.0  # market seconds between looks (each reads our record from the ledger)


class SwapWatch:
    def __init__(self, fleet: Fleet, queue: JobQueue) -> None:
        self.fleet = fleet
        self.queue = queue
        self.slow: dict[int, Slow] = {}  # instance id -> since when it is slow, and why
        self.looked_at = -1e18

    def due(self, instance_id: int, now: float) -> bool:
        return swap_due(self.slow.get(instance_id), now)

    def look(self, now: float, book: OfferBook, can_create: bool) -> None:
        """One more look at every host in service (see the module's doc)."""
        if book.policy.rank != "expected_cost" or now - self.looked_at < LOOK_EVERY_S:
            return
        self.looked_at = now
        hosts = self.fleet.in_service()
        self.slow = {k: v for k, v in self.slow.items() if any(a.instance_id == k for a in hosts)}
        pending = [j.job for j in self.queue.jobs if j.status == "pending"]
        work = book.work_outlook(pending, max(1, len(hosts))) if pending and hosts else None
        fresh = None
        if work is not None and can_create:
            value = book.policy.value_of_time_usd_per_h
            fresh = fresh_usd_per_ref_h(book.fit(), book.history(), work, value)
        for a in hosts:
            ratio, why = None, ""
            if work is not None and fresh is not None and fresh[0] > 0:
                rate = self.rate(a, work)
                keep = keep_usd_per_ref_h(
                    a.gpu_dph + a.storage_dph,
                    rate,
                    work.job_ref_h,
                    book.policy.value_of_time_usd_per_h,
                )
                ratio = keep / fresh[0]
                why = (
                    f"slow for its price: {rate:.2f} ref-h/h at ${a.gpu_dph + a.storage_dph:.3f}/h "
                    f"is ${keep:.3f} per ref-h, {ratio:.1f}x a fresh create's ${fresh[0]:.3f} "
                    f"({fresh[1]})"
                )
            slow = next_slow(self.slow.get(a.instance_id), ratio, now, why)
            if slow is None:
                self.slow.pop(a.instance_id, None)
            else:
                self.slow[a.instance_id] = slow

    def rate(self, a: Attempt, work: WorkOutlook) -> float:
        """Reference GPU-hours an hour this host delivers, as best measured: its running job's, else
        the ledger's, else its preflight's less throttling, else its model's."""
        job = self.queue.on(a.instance_id)
        d = job.delivery if job is not None else None
        if d is not None and d.source == "progress" and d.tflops:
            return d.tflops / work.ref_tflops
        if a.machine_id in work.speeds:
            return work.rate(a.gpu_name, a.machine_id)
        v, model = a.verdict, expected_tflops(a.gpu_name)
        if v is not None and v.tflops and v.expected and model:
            # the probe's speed as a share of what it expects on this model (its torch or its
            # driver path), carried over to the model's bf16 speed
            slowdown = a.throttle.slowdown if a.throttle and a.throttle.throttled else 0.0
            return model * v.tflops / v.expected * (1 - slowdown) / work.ref_tflops
        return work.rate(a.gpu_name, a.machine_id)
