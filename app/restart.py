"""Starting again after a crash: settle the calls a dead controller left unanswered, adopt
the campaign's live instances (and, under `reuse_stopped`, proven rentals an earlier campaign
stopped), and write down what changed while nobody watched."""

from __future__ import annotations

from typing import Any

from .attempt import Attempt
from .client import ApiError, MarketUnavailable, VastClient
from .core.billing import Mark, took_effect_at
from .core.campaign import Campaign
from .core.lifecycle import ALIVE, Phase
from .core.models import Instance
from .core.policy import Policy
from .ledger import Event, Ledger
from .ssh_runner import SSHRunner

LABEL_PREFIX = "rw"


class Restart:
    """Needs, from the class it is mixed into: the attributes below and the methods that
    raise NotImplementedError here."""

    client: VastClient
    ledger: Ledger
    policy: Policy
    campaign: Campaign
    ssh: SSHRunner
    attempts: dict[int, Attempt]
    quarantine: dict[int, str]
    creates: int
    last_alive: float | None
    adopt_all = False  # watch mode: adopt every instance of the account, not only this campaign's

    @property
    def label(self) -> str:
        raise NotImplementedError

    def now(self) -> float:
        raise NotImplementedError

    def answered_at(self) -> float:
        raise NotImplementedError

    def _say(self, line: str) -> None:
        raise NotImplementedError

    def _ctx(self, a: Attempt) -> dict[str, Any]:
        raise NotImplementedError

    async def _start(self, a: Attempt, actor: str, reason: str) -> float:
        raise NotImplementedError

    def _took_effect_at(self, intent: Event) -> float:
        """When a change the crash cut short took effect, from its tries in the ledger."""
        tries = self.ledger.events(where="kind = 'sent' AND intent_seq = ?", params=[intent.seq])
        return took_effect_at(intent.at, [(t.at, t.detail.get("after")) for t in tries])

    async def reconcile(self) -> None:
        """Finish what a crash left half-done, and adopt this campaign's live instances."""
        live = {i.id: i for i in await self.client.list_instances()}
        now = self.answered_at()
        by_label = {i.label: i for i in live.values() if i.label}
        for ev in self.ledger.unfinished_intents():
            if ev.campaign != self.campaign.name:
                continue
            # A call the crash cut short: where the list shows it took effect, it is dated by the
            # tries written down as they went out (the market acts on a request as it arrives).
            if ev.kind == "create":
                found = by_label.get(str(ev.detail.get("label")))
                self.ledger.outcome(
                    ev.seq,
                    at=(found.start_date or now) if found else now,
                    ok=found is not None,
                    error=None if found else "never happened (reconciled after restart)",
                    instance_id=found.id if found else None,
                    detail={"reconciled": True, "gpu_billing": self.client.gpu_billing},
                )
                if found:
                    self.creates += 1
            elif ev.kind == "destroy":
                gone = ev.instance_id not in live
                self.ledger.outcome(
                    ev.seq,
                    at=self._took_effect_at(ev) if gone else now,
                    ok=gone,
                    error=None if gone else "still there after restart",
                    detail={"reconciled": True},
                )
            elif ev.kind in ("stop", "start") and ev.instance_id in live:
                wanted = "stopped" if ev.kind == "stop" else "running"
                took = live[ev.instance_id].intended_status == wanted
                self.ledger.outcome(
                    ev.seq,
                    at=self._took_effect_at(ev) if took else now,
                    ok=took,
                    error=None if took else f"not {wanted} after restart: it never happened",
                    detail={"reconciled": True},
                )
            else:
                self.ledger.outcome(
                    ev.seq,
                    at=now,
                    ok=False,
                    error="outcome unknown: the controller died mid-call",
                    detail={"reconciled": True},
                )
        for inst in live.values():
            if not self.adopt_all and not (inst.label or "").startswith(self.label + ":"):
                continue
            self._adopt(inst, now)
        if self.policy.reuse_stopped:
            await self._reuse_stopped(live, now)

    async def _reuse_stopped(self, live: dict[int, Instance], now: float) -> None:
        """Hold and batch across campaigns: a stopped rental that passed its preflight before
        (same image) is started again instead of rolling the dice on a new create."""
        room = self.campaign.fleet - sum(1 for a in self.attempts.values() if a.life.phase in ALIVE)
        for inst in live.values():
            if room <= 0:
                return
            if inst.id in self.attempts or inst.intended_status != "stopped":
                continue
            if (
                not (inst.label or "").startswith(LABEL_PREFIX + ":")
                or inst.image != self.campaign.image
            ):
                continue
            history = self.ledger.events(where="instance_id = ?", params=[inst.id])
            if not any(
                e.kind == "preflight_passed" and e.detail.get("by_preflight") for e in history
            ):
                continue
            if inst.machine_id in self.quarantine:
                continue
            self._adopt(inst, now)
            a = self.attempts[inst.id]
            try:
                await self._start(
                    a, "rule:reuse", "a proven rental, stopped: start it again rather than create"
                )
            except (ApiError, MarketUnavailable):
                continue  # the failed start is in the ledger; the fleet creates instead
            room -= 1
            self._say(f"reuse  i:{inst.id} m:{inst.machine_id} proven before: started again")

    def _changed_elsewhere(self, a: Attempt, kind: str, now: float) -> None:
        """A stop or start the ledger did not see (the host's watchdog stopped it while no
        controller ran, or a person used the web console): written down now, as a fact. When it
        happened is unknown; dating it now bills the GPU time in between, never less."""
        since = self.last_alive or a.created_at
        self.ledger.record(
            kind,
            at=now,
            actor="reconcile",
            reason=f"found {'stopped' if kind == 'stop' else 'running'}: changed outside this "
            f"controller in the last {(now - since) / 60:.1f} min (the watchdog or the operator)",
            ok=True,
            detail={"noticed_between": [since, now]},
            **self._ctx(a),
        )
        a.marks.append(Mark(now, kind))

    def _adopt(self, inst: Instance, now: float) -> None:
        history = self.ledger.events(where="instance_id = ?", params=[inst.id])
        create = next(
            (e for e in history if e.kind == "create" and e.phase == "outcome" and e.ok), None
        )
        created_at = create.at if create else (inst.start_date or now)
        a = Attempt(
            instance_id=inst.id,
            offer=None,
            machine_id=inst.machine_id,
            host_id=inst.host_id,
            gpu_name=(create.gpu_name if create and create.gpu_name else inst.gpu_name)
            or "unknown",
            created_at=created_at,
            gpu_dph=create.gpu_dph if create and create.gpu_dph is not None else inst.dph_base,
            storage_dph=create.storage_dph
            if create and create.storage_dph is not None
            else inst.storage_total_cost,
            label=inst.label,
        )
        a.marks.append(Mark(created_at, "create", a.gpu_dph, a.storage_dph))
        passed = any(e.kind == "preflight_passed" for e in history)
        pins = [e.detail["host_key"] for e in history if e.detail.get("host_key")]
        if pins:  # the key it proved itself with: a host answering with another is refused
            self.ssh.pinned[inst.id] = str(pins[-1])
        stopped = inst.intended_status == "stopped"
        for e in history:  # the marks billing_marks reads: outcomes and facts that held
            if e.kind in ("stop", "start") and e.phase != "intent" and e.ok:
                a.marks.append(Mark(e.at, e.kind))
        held = next((m.kind != "stop" for m in reversed(a.marks) if m.kind != "create"), True)
        if held == stopped:  # changed behind the ledger's back: the watchdog, or a person
            self._changed_elsewhere(a, "stop" if stopped else "start", now)
        a.life.move(Phase.BOOTING, now, "adopted")
        a.passed_preflight = passed  # proven once: automation may stop it, never destroy it
        if inst.actual_status == "running":
            a.life.move(Phase.RUNNING, now, "adopted running")
            a.running_at = now
            if passed:
                a.life.move(Phase.VERIFIED, now, "adopted, verified before the restart")
        if stopped:
            a.life.move(Phase.STOPPED, now, "adopted stopped")
        a.status, a.status_msg, a.status_since = inst.actual_status, inst.status_msg, now
        a.ssh_host, a.ssh_port = inst.ssh_host, inst.ssh_port
        self.attempts[inst.id] = a
        last_seen = max([e.at for e in history] + [created_at, self.last_alive or 0.0])
        unwatched = max(0.0, now - last_seen)
        cost = (
            a.charges(self.client.gpu_billing, now).total_usd
            - a.charges(self.client.gpu_billing, last_seen).total_usd
        )
        self.ledger.record(
            "adopted",
            at=now,
            actor="engine",
            reason=(
                f"adopted after restart: {inst.actual_status}, unwatched for {unwatched / 60:.1f} min, "
                f"${cost:.4f} billed meanwhile"
            ),
            detail={"unwatched_s": unwatched, "usd_meanwhile": cost, "status": inst.actual_status},
            **self._ctx(a),
        )
        self._say(
            f"adopt  i:{inst.id} m:{inst.machine_id} {inst.actual_status}, unwatched {unwatched / 60:.1f} min, "
            f"${cost:.4f} meanwhile"
        )
