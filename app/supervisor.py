"""The supervisor: the shell that executes the rules' decisions against the marketplace.

One list call per poll; polls never overlap (one loop); preflights run in parallel with bounded
concurrency; every marketplace action is written to the ledger as intent, then outcome.
Automated destroys go through `_abandon`, which refuses an instance that passed its preflight;
a human destroy goes through `human_destroy`, which needs a `DestroyConfirmation` naming the
instance.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .attempt import Attempt
from .client import ApiError, AuthError, MarketUnavailable, VastClient
from .core.billing import Mark
from .core.campaign import Campaign
from .core.errors import MalformedAnswer, RentwatchError
from .core.gpu_specs import driver_too_old, offer_contradicts_itself
from .core.jobs import JobQueue
from .core.lifecycle import ALIVE, HELD, Phase
from .core.models import Instance, Offer
from .core.policy import Policy
from .core.reputation import rank_offers
from .core.rules import (
    Abandon,
    Create,
    Decision,
    Finish,
    FleetSnapshot,
    StartPreflight,
    Stop,
    Verify,
    decide,
)
from .host_work import HostWork
from .ledger import Ledger
from .restart import LABEL_PREFIX, Restart
from .ssh_runner import SSHRunner


class AutomationRefused(RentwatchError):
    title = "refused"


@dataclass(frozen=True)
class DestroyConfirmation:
    """What the operator typed to confirm a destroy: it must name the instance."""

    instance_id: int
    typed: str

    def valid(self) -> bool:
        return self.typed.strip() == str(self.instance_id)


@dataclass
class Outcome:
    ok: bool
    reason: str


class Supervisor(Restart, HostWork):
    def __init__(
        self,
        client: VastClient,
        ledger: Ledger,
        campaign: Campaign,
        policy: Policy,
        ssh: SSHRunner,
        log: Callable[[str], None] = print,
        max_parallel_ssh: int = 8,
    ) -> None:
        self.client = client
        self.ledger = ledger
        self.campaign = campaign
        self.policy = policy
        self.ssh = ssh
        self.log = log
        self.attempts: dict[int, Attempt] = {}
        self.creates = 0
        self.last_alive: float | None = None
        self.quarantine: dict[int, str] = {}
        # without quarantine, a failed machine is skipped for one retry only (as SkyPilot does)
        self.recent_failures: collections.deque[int] = collections.deque(
            maxlen=max(1, campaign.fleet)
        )
        self.ssh_slots = asyncio.Semaphore(max_parallel_ssh)
        self.finished: Outcome | None = None
        self.offers: list[Offer] = []
        self._offers_at = -1e18
        self.polls = 0
        self.detach = False
        self.decisions_log: list[str] = []
        self.decisions_total = 0
        self.listeners: list[Callable[[], None]] = []
        self.watchdog_window_s = (
            15 * 60.0
        )  # market seconds of heartbeat silence before a host stops itself
        self.beat_s = 120.0  # market seconds between heartbeats (and NVML samples)
        self.job_poll_s = 30.0  # market seconds between looks at a running job
        self.jobs = JobQueue(campaign.jobs)
        self.artifacts_root = Path("artifacts")
        self._ckpt_at: dict[str, float] = {}  # job name -> market time of its last checkpoint pull

    # -- helpers ---------------------------------------------------------------------------
    @property
    def label(self) -> str:
        return f"{LABEL_PREFIX}:{self.campaign.name}"

    def now(self) -> float:
        return self.client.now()

    def answered_at(self) -> float:
        return self.client.answered_at()

    async def _change(self, a: Attempt, kind: str, actor: str, reason: str) -> float:
        """Stop, start or destroy `a` the way the ledger wants every change: the intent, each
        try as it goes out (so a crash mid-call can be settled, see `Restart._took_effect_at`),
        then the outcome dated to when the change took effect. Returns that moment; raises what
        the market answered when it refused (the outcome records it too)."""
        call = {
            "stop": self.client.stop_instance,
            "start": self.client.start_instance,
            "destroy": self.client.destroy_instance,
        }[kind]
        seq = self.ledger.intent(kind, at=self.now(), actor=actor, reason=reason, **self._ctx(a))

        def sent(at: float, previous: str | None) -> None:
            self.ledger.record(
                "sent",
                at=at,
                actor=actor,
                reason="request sent"
                if previous is None
                else f"sent again: the last try {previous}",
                intent_seq=seq,
                detail={"after": previous},
                **self._ctx(a),
            )

        try:
            acted = await call(a.instance_id, sent)
        except (ApiError, MarketUnavailable) as exc:
            self.ledger.outcome(seq, at=self.answered_at(), ok=False, error=str(exc))
            raise
        detail: dict[str, object] = {}
        if not acted.existed:
            detail["already_gone"] = True
        if acted.answer_lost:
            detail["answer_lost"] = True  # dated to the send of the try that got no answer
        self.ledger.outcome(seq, at=acted.at, ok=True, detail=detail or None)
        a.marks.append(Mark(acted.at, kind))
        return acted.at

    async def _start(self, a: Attempt, actor: str, reason: str) -> float:
        at = await self._change(a, "start", actor, reason)
        a.life.move(Phase.BOOTING, at, reason)
        a.status_since = at
        return at

    def _say(self, line: str) -> None:
        self.decisions_total += 1
        self.decisions_log.append(line)
        del self.decisions_log[:-500]
        self.log(line)

    def _ctx(self, a: Attempt) -> dict[str, Any]:
        return {
            "campaign": self.campaign.name,
            "instance_id": a.instance_id,
            "machine_id": a.machine_id,
            "host_id": a.host_id,
            "gpu_name": a.gpu_name,
            "gpu_dph": a.gpu_dph,
            "storage_dph": a.storage_dph,
            "offer_id": a.offer.id if a.offer else None,
        }

    def spent(self, now: float) -> float:
        mode = self.client.gpu_billing
        return sum(a.charges(mode, now).total_usd for a in self.attempts.values())

    def held(self) -> list[Attempt]:
        return [a for a in self.attempts.values() if a.life.phase in HELD]

    # -- start: quarantine, key, reconcile, adopt -------------------------------------------
    async def prepare(self) -> None:
        await self.client.sync_clock()
        now = self.now()
        # the last sign of life of an earlier run of this campaign: what it held was watched
        # until then, and unwatched from then until this start adopts it
        self.last_alive = self.ledger.last_event_at(self.campaign.name)
        self.ledger.record(
            "campaign_start",
            at=now,
            actor="engine",
            campaign=self.campaign.name,
            reason=f"campaign {self.campaign.name} under policy {self.policy.name}",
            detail={"policy": self.policy.name, "fleet": self.campaign.fleet},
        )
        if self.policy.quarantine_persistent:
            self.quarantine.update(self.ledger.quarantined(now))
        elif self.policy.quarantine:
            for ev in self.ledger.events(
                where="kind = 'quarantine' AND campaign = ?", params=[self.campaign.name]
            ):
                if ev.machine_id is not None:
                    self.quarantine[ev.machine_id] = ev.reason
        self.creates = len(
            self.ledger.events(
                where="kind = 'create' AND phase = 'outcome' AND ok AND campaign = ?",
                params=[self.campaign.name],
            )
        )
        await self.client.add_ssh_key(self.ssh.public_key)
        self._restore_jobs()
        await self.reconcile()
        for (
            a
        ) in self.attempts.values():  # adopted proven rentals: watch them and re-attach their jobs
            if a.passed_preflight and a.life.phase == Phase.VERIFIED and a.tend_task is None:
                a.tend_task = asyncio.create_task(self._tend(a))

    # -- the poll ---------------------------------------------------------------------------
    async def poll_once(self) -> list[Decision]:
        try:
            instances = await self.client.list_instances()
        except AuthError:
            raise
        except (MarketUnavailable, MalformedAnswer) as exc:
            self._say(f"poll   market unavailable this round: {exc}")
            return []
        now = self.answered_at()
        self.polls += 1
        self._observe({i.id: i for i in instances}, now)
        snap = self._snapshot(now)
        decisions = decide(snap, self.policy, now)
        for d in decisions:
            await self._execute(d)
        self._reap_jobs(now)
        await self._dispatch_jobs(now)
        for fn in self.listeners:
            fn()
        return decisions

    def _observe(self, live: dict[int, Instance], now: float) -> None:
        for a in list(self.attempts.values()):
            if a.life.phase in (Phase.DESTROYED, Phase.LOST):
                continue
            inst = live.get(a.instance_id)
            if inst is None:
                if a.life.phase != Phase.REQUESTED or now - a.created_at > 120:
                    a.life.move(Phase.LOST, now, "gone from the marketplace's list")
                    a.marks.append(Mark(now, "destroy"))
                    self.ledger.record(
                        "lost",
                        at=now,
                        actor="engine",
                        ok=True,
                        reason="instance vanished from the account without our destroy",
                        **self._ctx(a),
                    )
                    self._say(f"lost   i:{a.instance_id} m:{a.machine_id} vanished from the list")
                continue
            status = inst.known_status
            if status != a.status:
                self.ledger.record(
                    "status",
                    at=now,
                    actor="engine",
                    reason=f"status {a.status} -> {status}",
                    detail={"status": status, "msg": (inst.status_msg or "")[:300]},
                    **self._ctx(a),
                )
                if status == "running" and a.status != "running":
                    a.marks.append(Mark(now, "running"))
                elif a.status == "running" and status in ("exited", "offline", "unknown"):
                    a.marks.append(Mark(now, "halt"))
            if status != a.status or inst.status_msg != a.status_msg:
                a.status_since = now
            a.status, a.status_msg = status, inst.status_msg
            a.ssh_host, a.ssh_port = inst.ssh_host, inst.ssh_port
            if a.life.phase == Phase.REQUESTED:
                a.life.move(Phase.BOOTING, now, "listed by the marketplace")
            if status == "running" and a.life.phase == Phase.BOOTING:
                a.running_at = now
                a.life.move(Phase.RUNNING, now, "container running")
            if inst.gpu_util is not None and a.life.phase == Phase.VERIFIED:
                low = inst.gpu_util < self.policy.idle_util_pct
                a.util_low_since = (a.util_low_since or now) if low else None

    def _snapshot(self, now: float) -> FleetSnapshot:
        deadline = None
        if self.campaign.deadline_min is not None:
            starts = [
                e.at
                for e in self.ledger.events(
                    where="kind = 'campaign_start' AND campaign = ?",
                    params=[self.campaign.name],
                    limit=1,
                )
            ]
            deadline = (starts[0] if starts else now) + self.campaign.deadline_min * 60
        alive = tuple(
            dataclasses.replace(a.view(), busy=self.jobs.on(a.instance_id) is not None)
            for a in self.attempts.values()
            if a.life.phase in ALIVE
        )
        return FleetSnapshot(
            fleet=self.campaign.fleet,
            jobs_pending=self.jobs.pending,
            jobs_running=self.jobs.running,
            jobs_total=self.jobs.total,
            jobs_failed=sum(1 for j in self.jobs.jobs if j.status == "failed"),
            max_creates=self.campaign.max_creates,
            creates=self.creates,
            budget_usd=self.campaign.budget_usd,
            spent_usd=self.spent(now),
            attempts=alive,
            deadline=deadline,
            offers_available=len(self._fit_offers()) if self.offers else 1,
        )

    # -- executing decisions -----------------------------------------------------------------
    async def _execute(self, d: Decision) -> None:
        if isinstance(d, Create):
            await self._create(d)
        elif isinstance(d, Abandon):
            await self._abandon(d)
        elif isinstance(d, Stop):
            a = self.attempts[d.instance_id]
            if d.failure_class is not None and a.machine_id not in self.quarantine:
                self._quarantine(a, d.rule, d.reason, d.failure_class, self.answered_at())
            await self._stop(a, d.rule, d.reason)
        elif isinstance(d, StartPreflight):
            self._start_preflight(self.attempts[d.instance_id])
        elif isinstance(d, Verify):
            self._verify(self.attempts[d.instance_id], d)
        elif isinstance(d, Finish) and self.finished is None:
            self.finished = Outcome(d.ok, d.reason)
            self._say(f"done   {d.reason}")

    def _fit_offers(self) -> list[Offer]:
        mine = {a.machine_id for a in self.attempts.values() if a.life.phase in HELD}
        c = self.campaign
        return [
            o
            for o in self.offers
            if o.dph_total <= c.max_dph
            and (o.cuda_max_good is None or o.cuda_max_good >= c.image_cuda)
            and o.machine_id not in self.quarantine
            and o.machine_id not in mine
            and o.machine_id not in self.recent_failures
            and not (
                self.policy.offer_sanity
                and (
                    offer_contradicts_itself(o.gpu_name, o.dlperf)
                    or driver_too_old(o.driver_version, c.image_cuda)
                )
            )
        ]

    async def _refresh_offers(self) -> None:
        now = self.now()
        if now - self._offers_at < 60 and self._fit_offers():
            return
        query = dict(self.campaign.offer_query)
        query.setdefault("rentable", {"eq": True})
        self.offers = await self.client.search_offers(
            query, storage_gb=self.campaign.disk_gb, limit=1000
        )
        self._offers_at = now

    async def _create(self, d: Create) -> None:
        try:
            await self._refresh_offers()
        except (MarketUnavailable, MalformedAnswer, ApiError) as exc:
            self._say(f"create skipped: offer search failed: {exc}")
            return
        fit = self._fit_offers()
        if not fit:
            self._say("create skipped: no fit offer (price, CUDA, quarantine)")
            return
        history = (
            self.ledger.query(
                "select machine_id, count(*) filter (where verified_at is not null) as good, "
                "count(*) filter (where dud) as bad, avg(total_usd) filter (where dud) as dud_usd "
                "from instances group by machine_id"
            ).rows
            if self.policy.rank == "expected_cost"
            else []
        )
        ranked = rank_offers(
            fit,
            {int(m): (int(g), int(b), float(u or 0)) for m, g, b, u in history if m is not None},
            by=self.policy.rank,
        )
        offer, why = ranked[0]
        now = self.now()
        ctx: dict[str, Any] = {
            "campaign": self.campaign.name,
            "machine_id": offer.machine_id,
            "host_id": offer.host_id,
            "offer_id": offer.id,
            "gpu_name": offer.gpu_name,
            "gpu_dph": offer.dph_base,
        }
        self.ledger.record("offer_chosen", at=now, actor=d.rule, reason=why, **ctx)
        label = f"{self.label}:{secrets.token_hex(5)}"
        seq = self.ledger.intent(
            "create", at=now, actor=d.rule, reason=d.reason, detail={"label": label}, **ctx
        )
        try:
            res = await self.client.create_instance(
                offer.id,
                image=self.campaign.image,
                disk_gb=self.campaign.disk_gb,
                label=label,
                exact_label=True,
            )
        except (ApiError, MarketUnavailable, MalformedAnswer) as exc:
            self.ledger.outcome(seq, at=self.answered_at(), ok=False, error=str(exc))
            self._say(f"create FAILED on offer {offer.id} m:{offer.machine_id}: {exc}")
            self.offers = [o for o in self.offers if o.id != offer.id]
            return
        at = res.created_at if res.created_at is not None else self.answered_at()
        storage_dph = self.campaign.disk_gb * offer.storage_cost / (30 * 24)
        self.creates += 1
        a = Attempt(
            instance_id=res.instance_id,
            offer=offer,
            machine_id=offer.machine_id,
            host_id=offer.host_id,
            gpu_name=offer.gpu_name,
            created_at=at,
            gpu_dph=offer.dph_base,
            storage_dph=storage_dph,
            status_since=at,
            label=res.label,
        )
        a.marks.append(Mark(at, "create", a.gpu_dph, a.storage_dph))
        self.attempts[a.instance_id] = a
        self.ledger.outcome(
            seq,
            at=at,
            ok=True,
            instance_id=a.instance_id,
            storage_dph=storage_dph,
            detail={"label": res.label, "gpu_billing": self.client.gpu_billing},
        )
        self.offers = [o for o in self.offers if o.id != offer.id]
        self._say(
            f"create i:{a.instance_id} m:{offer.machine_id} {offer.gpu_name} ${offer.dph_total:.3f}/h "
            f"({self.creates}/{self.campaign.max_creates}) - {why}"
        )

    async def _abandon(self, d: Abandon) -> None:
        a = self.attempts[d.instance_id]
        if a.passed_preflight:  # the executor's own guard, beside the decision type's
            raise AutomationRefused(f"automation may not destroy verified instance {a.instance_id}")
        now = self.answered_at()
        if a.life.phase != Phase.ABANDONED:
            a.failure_class = d.failure_class
            a.life.move(Phase.ABANDONED, now, d.reason)
            if a.preflight_task:
                a.preflight_task.cancel()
            spent = a.charges(self.client.gpu_billing, now).total_usd
            self.ledger.record(
                "abandon",
                at=now,
                actor=d.rule,
                reason=d.reason,
                detail={"class": d.failure_class, "usd": spent},
                **self._ctx(a),
            )
            self._say(
                f"abandon i:{a.instance_id} m:{a.machine_id} [{d.failure_class}] {d.reason} "
                f"(${spent:.4f}, {(now - a.created_at) / 60:.1f} min)"
            )
            if a.machine_id is not None and d.failure_class != "cancelled":
                self.recent_failures.append(a.machine_id)
            if d.failure_class != "cancelled":
                self._quarantine(a, d.rule, d.reason, d.failure_class, now)
        await self._destroy(a, d.rule, f"abandoned: {d.reason}")

    def _quarantine(
        self, a: Attempt, rule: str, reason: str, failure_class: str, now: float
    ) -> None:
        if not self.policy.quarantine or a.machine_id is None:
            return
        until = (
            now + self.policy.quarantine_hours * 3600
            if (self.policy.quarantine_persistent and self.policy.quarantine_hours)
            else None
        )
        self.quarantine[a.machine_id] = reason
        self.ledger.record(
            "quarantine",
            at=now,
            actor=rule,
            reason=reason,
            detail={
                "until": until,
                "class": failure_class,
                "scope": "ledger" if self.policy.quarantine_persistent else "campaign",
            },
            **self._ctx(a),
        )

    async def _destroy(self, a: Attempt, actor: str, reason: str) -> bool:
        try:
            at = await self._change(a, "destroy", actor, reason)
        except (ApiError, MarketUnavailable) as exc:
            self._say(f"destroy FAILED i:{a.instance_id}: {exc} (will retry)")
            return False
        a.life.move(Phase.DESTROYED, at, reason)
        return True

    async def _stop(self, a: Attempt, actor: str, reason: str) -> bool:
        try:
            at = await self._change(a, "stop", actor, reason)
        except (ApiError, MarketUnavailable) as exc:
            self._say(f"stop FAILED i:{a.instance_id}: {exc}")
            return False
        a.life.move(Phase.STOPPED, at, reason)
        if a.preflight_task:
            a.preflight_task.cancel()
        cost = a.charges(self.client.gpu_billing, at).total_usd
        self._say(
            f"stop   i:{a.instance_id} m:{a.machine_id} by {actor}: {reason} (${cost:.4f} so far)"
        )
        return True

    def _verify(self, a: Attempt, d: Verify) -> None:
        now = self.answered_at()
        a.life.move(Phase.VERIFIED, now, d.reason)
        if d.by_preflight:
            a.passed_preflight = True
        self.ledger.record(
            "preflight_passed",
            at=now,
            actor=d.rule,
            reason=d.reason,
            ok=True,
            detail={
                "by_preflight": d.by_preflight,
                "tflops": a.verdict.tflops if a.verdict else None,
                "expected": a.verdict.expected if a.verdict else None,
                # pinned here, held to after a restart (see _adopt)
                "host_key": self.ssh.pinned.get(a.instance_id),
            },
            **self._ctx(a),
        )
        self._say(f"verify i:{a.instance_id} m:{a.machine_id} {a.gpu_name}: {d.reason}")
        if d.by_preflight and a.tend_task is None:
            a.tend_task = asyncio.create_task(self._tend(a))

    # -- the run -----------------------------------------------------------------------------
    async def run(self) -> Outcome:
        await self.prepare()
        while self.finished is None:
            await self.poll_once()
            if self.finished is None:
                await asyncio.sleep(self._wall(self.campaign.poll_s, 0.02))
        return self.finished

    async def release_all(self, actor: str, reason: str) -> None:
        """Leave nothing billing GPU time: stop what passed (or was trusted), destroy the rest."""
        for a in list(self.attempts.values()):
            for task in (a.preflight_task, a.tend_task):
                if task:
                    task.cancel()
        for a in self.held():
            try:
                if a.life.phase == Phase.ABANDONED or not (
                    a.passed_preflight or a.life.phase == Phase.VERIFIED
                ):
                    if a.life.phase != Phase.ABANDONED:
                        self.ledger.record(
                            "abandon",
                            at=self.now(),
                            actor=actor,
                            reason=reason,
                            detail={"class": "cancelled"},
                            **self._ctx(a),
                        )
                        a.life.move(Phase.ABANDONED, self.now(), reason)
                    await self._destroy(a, actor, reason)
                else:
                    await self._stop(a, actor, reason)
            except Exception as exc:  # one failure must not keep the rest running
                self._say(f"release FAILED i:{a.instance_id}: {exc!r}")

    async def detach_all(self, reason: str) -> None:
        for a in self.held():
            self.ledger.record(
                "detached", at=self.now(), actor="human", reason=reason, **self._ctx(a)
            )
        self.detach = True

    async def human_destroy(
        self, confirmation: DestroyConfirmation, reason: str = "operator destroy"
    ) -> bool:
        """The only path that may destroy a verified instance: the operator typed its id."""
        if not confirmation.valid():
            raise AutomationRefused(f"destroy of {confirmation.instance_id} not confirmed")
        a = self.attempts.get(confirmation.instance_id)
        if a is None:
            raise AutomationRefused(
                f"instance {confirmation.instance_id} is not held by this campaign"
            )
        if a.preflight_task:
            a.preflight_task.cancel()
        return await self._destroy(a, "human", reason)

    async def human_stop(self, instance_id: int, reason: str = "operator stop") -> bool:
        return await self._stop(self.attempts[instance_id], "human", reason)

    async def human_start(self, instance_id: int, reason: str = "operator start") -> bool:
        await self._start(self.attempts[instance_id], "human", reason)
        self._say(f"start  i:{instance_id} by human")
        return True

    async def human_create(self) -> None:
        await self._create(Create("human", "operator asked for one more instance"))

    async def close(self) -> None:
        for a in self.attempts.values():
            for task in (a.preflight_task, a.tend_task):
                if task:
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
