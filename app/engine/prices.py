"""Hosts' price increases on our rentals (vast-cli PR #401): every five market minutes the pending
increases are read, each on an owned rental decided by `core/worth/price_increase.py`, answered,
and written to the ledger before and after the call. An accepted one bills from its contract's
end date (a `price` event); a rejected one moves the work now and stops the rental."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.campaign import Campaign
from ..core.lifecycle import Phase
from ..core.policy import Policy
from ..core.worth.price_increase import IncreaseCase, PriceIncrease, PriceVerdict, decide_increase
from ..core.worth.swap import fresh_usd_per_ref_h
from ..ledger import EventKind, Ledger
from ..market.errors import REFUSALS
from ..market.protocol import Market
from .actions import Actions
from .attempt import Attempt
from .fleet import Fleet
from .jobs.work import JobWork
from .journal import Journal
from .offers import OfferBook
from .updates import Repriced, Set

K = EventKind
LOOK_EVERY_S = 300.0  # market seconds between two reads of the pending increases (a rise
# waits for its contract's end date: minutes late costs nothing, a call each poll would)
GONE = (Phase.ABANDONED, Phase.DESTROYED, Phase.LOST, Phase.STOPPED)


@dataclass(eq=False)
class PriceWatch:
    market: Market
    journal: Journal
    fleet: Fleet
    jobs: JobWork
    actions: Actions
    book: OfferBook
    campaign: Campaign
    policy: Policy
    # pending ids answered (or refused: not asked again)
    answered: set[int] = field(default_factory=set, init=False)
    looked_at: float = field(default=-1e18, init=False)

    def restore(self, ledger: Ledger) -> None:
        """Increases accepted before a restart whose new price is not yet written: still due."""
        accepted = {
            e.instance_id: e
            for e in ledger.events(where="kind = 'price_increase' AND phase = 'outcome' AND ok")
            if e.detail.get("decision") == "accept"
        }
        priced = {e.instance_id for e in ledger.events(where="kind = 'price'")}
        for iid, e in accepted.items():
            a = self.fleet.attempts.get(iid) if iid is not None else None
            at, price, pid = (e.detail.get(k) for k in ("takes_effect_at", "new_gpu_dph", "id"))
            if a is None or iid in priced or not isinstance(at, int | float):
                continue
            if isinstance(price, int | float) and isinstance(pid, int):
                self.journal.writer.emit(Set(a, {"price_due": (float(at), float(price), pid)}))
                self.answered.add(pid)

    def apply_due(self, now: float) -> None:
        """Each accepted increase whose moment has come: the new price, dated to it (before the
        observer reads the rows, which show the new price from then)."""
        for a in self.fleet.attempts.values():
            due = a.price_due
            if due is None or now < due[0]:
                continue
            self.journal.writer.emit(Repriced(a, *due))

    async def look(self, now: float) -> None:
        if now - self.looked_at < LOOK_EVERY_S:
            return
        self.looked_at = now
        try:
            pending = await self.market.pending_price_increases()
        except REFUSALS as exc:
            self.journal.say(f"prices pending increases could not be read: {exc}")
            return
        for inc in pending:
            a = self.fleet.attempts.get(inc.instance_id)
            if inc.pending_id in self.answered or a is None or not a.owned:
                continue
            if a.life.phase in GONE:
                continue
            if self.book.stale():
                await self.book.refresh()
            await self.carry_out(a, decide_increase(self.case(a, inc, now)), now)

    def case(self, a: Attempt, inc: PriceIncrease, now: float) -> IncreaseCase:
        """What the rule weighs: the rental's prices now and after, its delivered speed, the
        work ahead, a fresh create's cost per unit and what a move would redo."""
        gpu = inc.new_gpu_dph * a.num_gpus if inc.new_gpu_dph is not None else a.gpu_dph
        storage = a.storage_dph
        if inc.new_storage_gb_h is not None:
            storage = inc.new_storage_gb_h * self.campaign.disk_gb
        queue = self.jobs.queue
        on = queue.on(a.instance_id)
        ahead = [j.job for j in queue.jobs if j.status == "pending" or j is on]
        hosts = self.fleet.in_service()
        work = self.book.work_outlook(ahead, max(1, len(hosts))) if ahead else None
        rate = fresh = None
        redo = 0.0
        value = self.policy.value_of_time_usd_per_h
        if work is not None:
            rate = self.jobs.swaps.rate(a, work)
            fresh = fresh_usd_per_ref_h(self.book.fit(), self.book.history(), work, value)
            if on is not None and on.started_at is not None:
                since = max(on.started_at, self.jobs.last_checkpoint(on) or on.started_at)
                redo = max(0.0, now - since) / 3600 * rate
        return IncreaseCase(
            inc,
            old_dph=a.gpu_dph + a.storage_dph,
            new_dph=gpu + storage,
            rate=rate,
            work_ref_h=work.job_ref_h if work is not None else 0.0,
            fresh=fresh,
            redo_ref_h=redo,
            value_of_time=value,
        )

    async def carry_out(self, a: Attempt, v: PriceVerdict, now: float) -> None:
        inc = v.increase
        self.answered.add(inc.pending_id)
        # the row's prices are per GPU; the rental is the whole machine's
        new_gpu = inc.new_gpu_dph * a.num_gpus if inc.new_gpu_dph is not None else a.gpu_dph
        detail = {
            "id": inc.pending_id,
            "decision": "accept" if v.accept else "reject",
            "old_gpu_dph": a.gpu_dph,
            "new_gpu_dph": new_gpu,
            "old_storage_dph": a.storage_dph,
            "new_storage_gb_h": inc.new_storage_gb_h,
            "others_changed": list(inc.others_changed),
            "takes_effect_at": inc.takes_effect_at,
            "new_end": inc.new_end,
            "keep_usd_per_ref_h": v.keep,
            "move_usd_per_ref_h": v.move,
        }
        seq = self.journal.intent(
            K.PRICE_INCREASE, self.journal.ctx(a), actor=v.rule, reason=v.reason, detail=detail
        )
        try:
            live = await self.market.answer_price_increase(inc.pending_id, v.accept)
        except REFUSALS as exc:
            self.journal.outcome(seq, at=self.market.answered_at(), ok=False, error=str(exc)[:300])
            self.journal.say(f"price  i:{a.instance_id} answer FAILED: {exc}")
            return
        at = self.market.answered_at()
        if not live:
            self.journal.outcome(seq, at=at, ok=False, error="no longer pending")
            self.journal.say(f"price  i:{a.instance_id} increase no longer pending")
            return
        self.journal.outcome(seq, at=at, ok=True, detail=detail)
        verb = "accept" if v.accept else "reject"
        self.journal.say(
            f"price  i:{a.instance_id} {verb} ${a.gpu_dph:.4f} -> ${new_gpu:.4f}/h: {v.reason}"
        )
        if v.accept:
            if inc.takes_effect_at is not None and inc.new_gpu_dph is not None:
                when = max(inc.takes_effect_at, at)
                self.journal.writer.emit(Set(a, {"price_due": (when, new_gpu, inc.pending_id)}))
            return
        await self.move_off(a, v, at)

    async def move_off(self, a: Attempt, v: PriceVerdict, now: float) -> None:
        """A rejected increase: its contract ends at its end date, so its work moves now (the
        job from its last checkpoint) and the rental is stopped, never destroyed."""
        job = self.jobs.queue.on(a.instance_id)
        if job is not None:
            self.jobs.requeue(job, now, "its host raised its price and we rejected it")
        await self.actions.stop(a, v.rule, v.reason)
