"""Starting again after a crash: settle the calls a dead controller left unanswered, adopt the
campaign's instances, and write down what changed while nobody watched. Only an instance with a
label this ledger gave is supervised; with `adopt_all` every other is observed, never acted on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.billing import event_mark, found_at, status_marks, took_effect_at
from ..core.campaign import Campaign
from ..core.models import Instance
from ..core.policy import Policy
from ..core.rows import LABEL_PREFIX, campaign_label, finite, row_problem
from ..ledger import Event, EventKind, Ledger
from ..market.errors import REFUSALS
from ..market.protocol import Market
from .actions import Actions
from .attempt import Attempt
from .fleet import Fleet
from .hosts.ssh import SSHRunner
from .journal import Journal
from .tier import hold_bid
from .updates import Adopted, ChangeTookEffect, FoundChanged, Replayed, Said, Set

K = EventKind
NOT_OURS = ("market", "reconcile", "watchdog")  # stops a restart does not take for ours


@dataclass(eq=False)
class Recovery:
    market: Market
    ledger: Ledger  # read only: writes go through the journal
    journal: Journal
    fleet: Fleet
    campaign: Campaign
    policy: Policy
    ssh: SSHRunner
    actions: Actions  # its starts, and the creates in flight
    adopt_all: bool = False  # watch: show every instance of the account (observed)
    # the earlier run's last sign of life
    last_alive: float | None = field(default=None, init=False)

    def ours(self, inst: Instance) -> bool:
        """Whether this campaign created it: it carries a label this ledger wrote into a create."""
        label = inst.label or ""
        return label.startswith(
            campaign_label(self.campaign.name) + ":"
        ) and self.ledger.wrote_label(self.campaign.name, label)

    def adopt_strays(self, instances: list[Instance], now: float, observe: bool = True) -> None:
        """A rental under this campaign's label that we do not hold is adopted, a bad row too: a
        live rental is never unwatched. Under `adopt_all` (and `observe`), another's readable
        row is observed only."""
        for inst in instances:
            if inst.id in self.fleet.attempts:
                continue
            if self.ours(inst):
                self.adopt(inst, now)  # its create goes into the ledger there
            elif observe and self.adopt_all and row_problem(inst) is None:
                self.adopt(inst, now, owned=False)

    async def hold_strays(self, why: str, wait: bool) -> int:
        """Hold every rental listed under this campaign's label that the fleet does not hold (a
        cancelled create, a lost answer: the campaign's until the market shows them gone), so the
        release and an end hold them; with `wait`, every create in flight answered first. How
        many were taken; a list failure is said."""
        if wait:
            await self.actions.landed()
        before = len(self.fleet.attempts)
        try:
            rows = await self.market.list_instances()
        except REFUSALS as exc:
            self.journal.say(f"{why} could not list the market for the campaign's label: {exc}")
            return 0
        rows = [r for r in rows if r.label not in self.actions.labels_in_flight]
        self.adopt_strays(rows, self.market.answered_at(), observe=False)
        found = len(self.fleet.attempts) - before
        if found:
            self.journal.say(
                f"{why} {found} rental(s) under the campaign's label were not held: held now"
            )
        return found

    def _found_created(self, inst: Instance, now: float) -> Event | None:
        """A rental under this campaign's label with no create in the ledger: its create written
        down."""
        self.fleet.creates += 1
        asked = self.ledger.events(  # its create as asked: the bid it carried, if any
            where="kind = 'create' AND phase = 'intent' AND detail->>'label' = ?",
            params=[inst.label or ""],
        )
        was: dict[str, Any] = asked[-1].detail if asked else {}
        tier: dict[str, Any] = {
            k: was[k] for k in ("bid", "bid_floor", "on_demand_dph") if k in was
        }
        self.journal.fact(
            K.CREATE,
            None,
            at=finite(inst.start_date, now),
            actor="reconcile",
            ok=True,
            reason="found carrying this campaign's label with no create in the ledger: a "
            "create whose answer was lost or named another id",
            detail={"label": inst.label, "gpu_billing": self.market.gpu_billing, **tier},
            instance_id=inst.id,
            machine_id=inst.machine_id,
            host_id=inst.host_id,
            gpu_name=inst.gpu_name,
            gpu_dph=finite(inst.gpu_dph, 0.0),
            storage_dph=finite(inst.storage_total_cost, 0.0),
        )
        return next(
            (e for e in self.ledger.instance_history(inst.id) if e.kind == K.CREATE and e.ok),
            None,
        )

    async def reconcile(self) -> None:
        """Finish what a crash left half-done, and adopt this campaign's live instances."""
        live = {i.id: i for i in await self.market.list_instances()}
        now = self.market.answered_at()
        by_label = {i.label: i for i in live.values() if i.label}
        for ev in self.ledger.unfinished_intents():
            if ev.campaign == self.campaign.name:
                self._settle(ev, live, by_label, now)
        self.adopt_strays(list(live.values()), now)
        if self.policy.reuse_stopped:
            await self._reuse_stopped(live, now)

    def _settle(
        self, ev: Event, live: dict[int, Instance], by_label: dict[str, Instance], now: float
    ) -> None:
        # A call the crash cut short: where the list shows it took effect, it is dated by the
        # tries written down as they went out (the market acts on a request as it arrives).
        j = self.journal
        if ev.kind == K.CREATE:
            found = by_label.get(str(ev.detail.get("label")))
            # an intent written before its storage price was (older ledgers): the row's
            storage = finite(found.storage_total_cost, 0.0) if found else None
            j.outcome(
                ev.seq,
                at=(found.start_date or now) if found else now,
                ok=found is not None,
                error=None if found else "never happened (reconciled after restart)",
                instance_id=found.id if found else None,
                storage_dph=storage if ev.storage_dph is None else None,
                detail={"reconciled": True, "gpu_billing": self.market.gpu_billing},
            )
            if found:
                self.fleet.creates += 1
            return
        took, error = False, "outcome unknown: the controller died mid-call"
        if ev.kind == K.DESTROY:
            took, error = ev.instance_id not in live, "still there after restart"
        elif ev.kind in (K.STOP, K.START) and ev.instance_id in live:
            wanted = "stopped" if ev.kind == K.STOP else "running"
            took = live[ev.instance_id].target_state == wanted
            error = f"not {wanted} after restart: it never happened"
        tries = [(t.at, t.detail.get("after")) for t in self.ledger.tries(ev.seq)]
        j.outcome(
            ev.seq,
            at=took_effect_at(ev.at, tries) if took else now,
            ok=took,
            error=None if took else error,
            detail={"reconciled": True},
        )

    async def _reuse_stopped(self, live: dict[int, Instance], now: float) -> None:
        """A stopped rental that passed its preflight before (same image) is started again instead
        of a new create, once the campaign that last held it has ended."""
        room = self.fleet.wanted - len(self.fleet.alive())
        for inst in live.values():
            if room <= 0:
                return
            seen = self.fleet.get(inst.id)
            if (seen is not None and seen.owned) or inst.target_state != "stopped":
                continue
            if (
                not (inst.label or "").startswith(LABEL_PREFIX + ":")
                or inst.image != self.campaign.image
            ):
                continue
            history = self.ledger.instance_history(inst.id)
            if not any(
                e.kind == K.PREFLIGHT_PASSED and e.detail.get("by_preflight") for e in history
            ):
                continue
            holders = {  # the campaigns that created, adopted, were handed or reused it
                e.campaign
                for e in history
                if e.kind in (K.CREATE, K.HAND_OVER)
                or (e.kind == K.ADOPTED and not e.detail.get("observed"))
                or e.actor == "rule:reuse"
            } - {self.campaign.name, None}
            if any(self.ledger.campaign_holds_on(c) for c in holders if c):
                continue  # another campaign still counts on it (running, crashed, or detached)
            if inst.machine_id in self.fleet.quarantine:
                continue
            if seen is not None:  # shown as observed (adopt_all): held anew, with its history
                del self.fleet.attempts[inst.id]
            # our own proven rental (its ledger says so): this campaign takes it, proven, with
            # its host key pinned, so automation may stop it but never destroy it
            a = self.adopt(inst, now)
            try:
                await self.actions.start(
                    a, "rule:reuse", "a proven rental, stopped: start it again rather than create"
                )
            except REFUSALS:
                continue  # the failed start is in the ledger; the fleet creates instead
            room -= 1
            self.journal.say(f"reuse  i:{inst.id} m:{inst.machine_id} proven before: started again")

    def _changed_elsewhere(self, a: Attempt, kind: EventKind, now: float) -> None:
        """A stop or start the ledger did not see (the watchdog, a person, a bid's resume),
        written down as a fact, dated to bill never less (`billing.found_at`)."""
        since = self.last_alive or a.created_at
        at = found_at(str(kind), a.marks, since, now)
        how = "stopped" if kind == K.STOP else "running"
        why = (
            f"found {how}: changed outside this controller in the last "
            f"{(now - since) / 60:.1f} min (the watchdog or the operator)"
        )
        detail = {"noticed_between": [since, now]}
        self.journal.writer.emit(FoundChanged(a, Said(kind, at, "reconcile", why, detail)))

    def adopt(self, inst: Instance, now: float, owned: bool = True) -> Attempt:
        """Hold a live instance found on the market: supervised (`owned`), or only observed."""
        history = self.ledger.instance_history(inst.id) if owned else []
        create = next((e for e in history if e.kind == K.CREATE and e.ok), None)
        if owned and create is None and self.ours(inst):
            create = self._found_created(inst, now)
        # the ledger's own figures first; the market's row only where they are finite
        created_at = create.at if create else finite(inst.start_date, now)
        a = Attempt(
            instance_id=inst.id,
            offer=None,
            machine_id=inst.machine_id,
            host_id=inst.host_id,
            gpu_name=(create.gpu_name if create and create.gpu_name else inst.gpu_name)
            or "unknown",
            created_at=created_at,
            gpu_dph=create.gpu_dph
            if create and create.gpu_dph is not None
            else finite(inst.gpu_dph, 0.0),
            storage_dph=create.storage_dph
            if create and create.storage_dph is not None
            else finite(inst.storage_total_cost, 0.0),
            label=inst.label,
            owned=owned,
            row_gpus=max(1, inst.num_gpus),
            created_by=create.campaign if create else None,
            verified_at=next(
                (
                    e.at
                    for e in history
                    if e.kind == K.PREFLIGHT_PASSED and e.campaign == self.campaign.name
                ),
                None,
            ),
        )
        self.journal.writer.emit(ChangeTookEffect(a, created_at, "create"))
        passed = any(e.kind == K.PREFLIGHT_PASSED for e in history)
        pins = [e.detail["host_key"] for e in history if e.detail.get("host_key")]
        if pins:  # the key it proved itself with: a host answering with another is refused
            self.ssh.pinned[inst.id] = str(pins[-1])
        stopped = inst.target_state == "stopped"
        said: str | None = None  # the last status the ledger holds for it
        for e in history:  # the marks the ledger's billing_marks view reads, in order
            settled = e.phase != "intent" and e.ok is not False  # as the view's coalesce(ok)
            mark = event_mark(e.at, e.kind, e.detail) if settled else None
            if mark is not None:  # a price: an accepted increase
                price = mark.gpu_dph if e.kind == K.PRICE else None
                self.journal.writer.emit(Replayed(a, [mark], price))
            elif e.kind == K.STATUS:
                said = e.detail.get("status")
                self.journal.writer.emit(Replayed(a, status_marks(e.at, said)))
        if owned and inst.known_status is not None and inst.known_status != said:
            self._status_found(a, inst, said, history, now)
        held = next(
            (m.kind == "start" for m in reversed(a.marks) if m.kind in ("stop", "start")), True
        )
        if held == stopped and owned:  # changed behind the ledger's back: the watchdog, or a person
            self._changed_elsewhere(a, K.STOP if stopped else K.START, now)
        where = (inst.status, inst.status_msg, inst.ssh_host, inst.ssh_port)
        self.journal.writer.emit(Adopted(a, now, *where, proven=passed, stopped=stopped))
        if stopped and owned:  # our own stop's rule kept: the reuse rule may start it again
            keep_our_stop(self.journal, a, history)
        self.fleet.add(a)
        written_off = [e for e in history if e.kind in (K.LOST, K.RETURNED)]
        if written_off and written_off[-1].kind == K.LOST:  # an earlier run wrote it off
            gone = written_off[-1]
            self.journal.fact(
                K.RETURNED,
                a,
                at=now,
                ok=True,
                reason=f"written off {(now - gone.at) / 60:.1f} min ago ({gone.reason}), still "
                "listed at the restart: billed as if never written off",
                detail={"lost_at": gone.at, "gap_s": now - gone.at, "status": inst.known_status},
            )
        if create is not None and create.detail.get("bid") is not None:  # the tier's
            history = self.ledger.instance_history(inst.id)
            hold_bid(self.journal, a, float(create.detail["bid"]), inst, history)
        if owned:
            self._record_adoption(a, inst, history, created_at, now)
        else:
            self._record_observed(a, inst, now)
        return a

    def _status_found(
        self, a: Attempt, inst: Instance, said: str | None, history: list[Event], now: float
    ) -> None:
        """Its status changed while no controller watched: written down, dated now (a start by the
        market's `uptime_mins`), never before the last thing the ledger knew."""
        status = inst.known_status
        at = now
        if status == "running" and inst.uptime_mins is not None:
            known = max([e.at for e in history] + [a.created_at, a.marks[-1].at if a.marks else 0])
            at = min(now, max(known, now - inst.uptime_mins * 60))
        self.journal.fact(
            K.STATUS,
            a,
            at=at,
            actor="reconcile",
            reason=f"status {said or 'none yet'} -> {status} (found at the restart)",
            detail={"status": status, "msg": (inst.status_msg or "")[:300]},
        )
        self.journal.writer.emit(Replayed(a, status_marks(at, status)))

    def _record_observed(self, a: Attempt, inst: Instance, now: float) -> None:
        label = repr((inst.label or "")[:60]) if inst.label else "no label"
        why = (
            f"observed, not supervised: not created by campaign {self.campaign.name} "
            f"({label}); shown and priced, only a person acts on it"
        )
        observed = {"observed": True, "status": inst.status}
        self.journal.fact(K.ADOPTED, a, at=now, reason=why, detail=observed)
        self.journal.say(f"observe i:{inst.id} m:{inst.machine_id} {inst.status}: {why}")

    def _record_adoption(
        self, a: Attempt, inst: Instance, history: list[Event], created_at: float, now: float
    ) -> None:
        last_seen = max([e.at for e in history] + [created_at, self.last_alive or 0.0])
        unwatched = max(0.0, now - last_seen)
        mode = self.market.gpu_billing
        cost = a.charges(mode, now).total_usd - a.charges(mode, last_seen).total_usd
        self.journal.fact(
            K.ADOPTED,
            a,
            at=now,
            reason=(
                f"adopted after restart: {inst.status}, unwatched for "
                f"{unwatched / 60:.1f} min, ${cost:.4f} billed meanwhile"
            ),
            detail={"unwatched_s": unwatched, "usd_meanwhile": cost, "status": inst.status},
        )
        self.journal.say(
            f"adopt  i:{inst.id} m:{inst.machine_id} {inst.status}, unwatched "
            f"{unwatched / 60:.1f} min, ${cost:.4f} meanwhile"
        )


def keep_our_stop(journal: Journal, a: Attempt, history: Sequence[Event]) -> None:
    """`a` was adopted stopped: where its last change is a stop of ours, that stop's rule stands,
    so the reuse rule starts it again while work remains (a restart carries on). A stop nobody
    here made, or a person's own, is not undone."""
    changes = [
        e
        for e in history
        if e.kind in (K.STOP, K.START, K.CREATE, K.RESUMED)
        and e.phase != "intent"
        and e.ok is not False
    ]
    last = changes[-1] if changes else None
    if last is not None and last.kind == K.STOP and not last.actor.startswith(NOT_OURS):
        journal.writer.emit(Set(a, {"stopped_by_us": True, "stop_rule": last.actor}))
