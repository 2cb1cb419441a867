"""Telling the operator who is not watching: after each poll, what the engine recorded (the ledger's
new events and the fleet's figures) becomes notices and metrics, and the run's end one last
notice. Nothing here acts; a failure here is logged and never reaches the poll."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..ledger import EventKind, Ledger
from ..ledger.event import Event
from ..notify import events as ev
from ..notify.metrics import Metrics
from ..notify.notifier import Notifier
from ..views.snapshot import snapshot
from .metrics_server import MetricsServer

if TYPE_CHECKING:
    from ..engine.supervisor import Supervisor

log = logging.getLogger(__name__)
K = EventKind
WATCHED = (K.CAMPAIGN_FAULT, K.XID, K.LOST, K.STATUS, K.PREFLIGHT_PASSED, K.OUTBID)
BUDGET_MARKS = {0.8: "budget_80", 1.0: "budget_100"}  # share of the budget spent: its notice


@dataclass(eq=False)
class Alerts:
    sup: Supervisor
    ledger: Ledger
    notifier: Notifier | None = None
    metrics: Metrics | None = None
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    seen_seq: int = 0
    acted_seq: int = 0  # the last stop or destroy a poll saw: what the end did comes after
    verified: set[int] = field(default_factory=set)
    offline: set[int] = field(default_factory=set)
    marks_passed: set[float] = field(default_factory=set)
    failed_jobs: set[str] = field(default_factory=set)
    poll_began: float | None = None
    failures: list[tuple[str, str]] = field(default_factory=list)  # from the notifier's thread
    server: MetricsServer | None = None

    @property
    def campaign(self) -> str:
        return self.sup.campaign.name

    def attach(self) -> Alerts:
        """Start listening: events already in the ledger (an earlier run's) are not news."""
        # only these kinds are ever read again, so the last of them is the last that was news
        rows = self.ledger.campaign_events(self.campaign, *WATCHED, K.STOP, K.DESTROY)
        self.verified = {
            e.instance_id
            for e in rows
            if e.kind == K.PREFLIGHT_PASSED and e.instance_id is not None
        }
        self.seen_seq = self.acted_seq = max((e.seq for e in rows), default=0)
        self.sup.before_poll.append(self._began)
        self.sup.listeners.append(self._done)
        return self

    def send(self, kind: str, **facts: object) -> None:
        """The notice of `kind` about this campaign (notify/events.py's wording of `facts`)."""
        if self.notifier is not None:
            self.notifier.notify(ev.notice(kind, self.campaign, **facts))

    # -- after each poll --------------------------------------------------------------------
    def _began(self) -> None:
        self.poll_began = self.monotonic()

    def _done(self) -> None:
        try:
            self._after_poll()
        except Exception:  # telling must never stop supervising
            log.exception("alerts: after-poll update failed")

    def _after_poll(self) -> None:
        while self.failures:  # a notifier's failures (from its thread): ledger and log
            url, why = self.failures.pop(0)
            self.sup.journal.fact(
                K.NOTE, None, actor="engine", reason=f"notify failed: {url}: {why}"
            )
            self.sup.journal.say(f"notify FAILED {url}: {why}")
        if self.notifier is None and self.metrics is None:
            return  # nobody to tell and nothing to count: the reads below are CPU for nothing
        if self.metrics is not None and self.poll_began is not None:
            self.metrics.observe_poll(self.monotonic() - self.poll_began, self.wall())
        # every event up to `stored` is in the file before the reads below: none of them is
        # news at the next poll, whether it matched or not, and a poll that wrote nothing
        # reads nothing (each read is milliseconds of the poll's CPU)
        stored = self.ledger.stored_through()
        if stored is None or stored > self.seen_seq:
            for e in self.ledger.campaign_events(self.campaign, *WATCHED, after=self.seen_seq):
                self.seen_seq = max(self.seen_seq, e.seq)
                self._event(e)
        acted = self._acted() if stored is None or stored > self.acted_seq else []
        self.seen_seq = max(self.seen_seq, stored or 0)
        self.acted_seq = max([self.seen_seq, self.acted_seq, *(e.seq for e in acted)])
        view = snapshot(self.sup, self.sup.now())
        budget = self.sup.campaign.budget_usd
        ratio = view.spent_usd / budget if budget else 0.0
        for mark, kind in BUDGET_MARKS.items():
            if ratio >= mark and mark not in self.marks_passed:
                self.marks_passed.add(mark)
                self.send(kind, spent_usd=view.spent_usd, budget_usd=budget)
        for job in self.sup.job_work.queue.jobs:
            if job.status == "failed" and job.job.name not in self.failed_jobs:
                self.failed_jobs.add(job.job.name)
                self.send(
                    "job_failed",
                    job=job.job.name,
                    attempts=job.attempts,
                    last_error=f"exit code {job.exit_code}",
                )
        if self.metrics is not None:
            phases = Counter(i.phase for i in view.instances)
            jobs = Counter(j.status for j in self.sup.job_work.queue.jobs)
            self.metrics.update(
                self.campaign, phases, view.spent_usd, view.creates, view.duds, jobs, ratio
            )

    def _event(self, e: Event) -> None:
        kind, iid, reason, detail = e.kind, e.instance_id, e.reason or "", e.detail or {}
        if kind == K.OUTBID and iid is not None:
            job = detail.get("job")
            self.send("outbid", instance_id=iid, job=str(job) if job else None)
        elif kind == K.PREFLIGHT_PASSED and iid is not None:
            self.verified.add(iid)
        elif kind == K.CAMPAIGN_FAULT:
            self.send("campaign_fault", cause=reason, image=detail.get("image"))
        elif kind == K.XID and iid is not None:
            xid = detail.get("xid")
            self.send("xid_stop", instance_id=iid, xid=xid if isinstance(xid, int) else 0)
        elif kind == K.LOST and iid in self.verified:
            self.send("host_lost", instance_id=iid, reason=reason)
        elif kind == K.STATUS and iid in self.verified:
            if detail.get("status") == "offline" and iid not in self.offline:
                self.offline.add(iid)
                self.send("host_offline", instance_id=iid)
            elif detail.get("status") != "offline":
                self.offline.discard(iid)

    # -- the end ------------------------------------------------------------------------------
    def _acted(self) -> list[Event]:
        rows = self.ledger.campaign_events(self.campaign, K.STOP, K.DESTROY, after=self.acted_seq)
        return [e for e in rows if e.phase != "intent" and e.ok and e.actor != "market"]

    def released(self) -> tuple[int, int]:
        """The instances the run's end stopped and destroyed (stopped then destroyed: destroyed)."""
        rows = self._acted()
        stopped = {e.instance_id for e in rows if e.kind == K.STOP}
        destroyed = {e.instance_id for e in rows if e.kind == K.DESTROY}
        return len(stopped - destroyed), len(destroyed)

    def ended(self, code: int, why: str, kind: str, left: int = 0) -> None:
        """The run's last word: its end with the receipt, or why it stopped short (`kind`)."""
        try:
            stopped, destroyed = self.released()
            if kind == "end":
                rows = self.ledger.receipt(self.campaign)
                r = rows[0] if rows else {}
                self.send(
                    "campaign_end",
                    creates=int(r.get("creates") or 0),
                    duds=int(r.get("duds") or 0),
                    spent_usd=float(r.get("total_usd") or 0.0),
                    usd_per_gpu_hour=r.get("usd_per_gpu_hour"),
                    jobs_finished=r.get("jobs_finished"),
                    stopped=stopped,
                    destroyed=destroyed,
                    apart=int(r.get("stopped_by_market") or 0) + int(r.get("cancelled") or 0),
                )
            elif kind == "key_refused":
                self.send("key_refused", detail=why)
            elif kind == "market_down":
                self.send("market_unreachable", error=why, since_s=0.0, held=left)
            elif kind == "trapped":
                self.send(
                    "controller_trapped",
                    signal=why,
                    stopped=stopped,
                    left=left,
                    destroyed=destroyed,
                )
            else:
                self.send("controller_exit", reason=why, stopped=stopped, destroyed=destroyed)
        except Exception:
            log.exception("alerts: end notice failed")

    def close(self, timeout: float = 10.0) -> None:
        if self.notifier is not None:
            self.notifier.close(timeout)
        if self.server is not None:
            self.server.close()


def open_alerts(
    sup: Supervisor,
    ledger: Ledger,
    urls: Sequence[str] = (),
    metrics_listen: str | None = None,
    secrets: Sequence[str | None] = (),
    metrics: Metrics | None = None,
) -> Alerts:
    """The run's notifier and metrics server (`--metrics HOST:PORT`), listening to `sup`."""
    from ..notify.metrics import parse_listen
    from ..notify.notifier import load_user_config

    user = load_user_config()
    all_urls = [*sup.campaign.notify, *urls, *user.urls]  # the notifier sends to each once
    if metrics is None and metrics_listen:
        metrics = Metrics()
    alerts = Alerts(sup, ledger, metrics=metrics)
    if all_urls:

        def failed(url: str, why: str) -> None:
            alerts.failures.append((url, why))
            if metrics is not None:
                metrics.notify_failed()

        alerts.notifier = Notifier(
            all_urls,
            min_level=user.level,
            secrets=tuple(s for s in secrets if s),
            on_failure=failed,
        )
    if metrics is not None and metrics_listen:
        host, port = parse_listen(metrics_listen)
        alerts.server = MetricsServer(metrics, host, port)
        sup.journal.say(f"metrics on http://{host}:{alerts.server.port}/metrics")
    return alerts.attach()
