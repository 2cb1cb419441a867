"""The supervisor: observe the market, ask the pure rules to decide, execute their decisions. Polls
never overlap; preflights run in parallel, bounded; every market change goes through `Actions`,
each decision through the `Executor`. The parts are composed in `__init__`, each handed only what
it needs."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

from ..core.campaign import Campaign
from ..core.decisions import Decision
from ..core.errors import MalformedAnswer
from ..core.jobs import JobQueue
from ..core.lifecycle import HELD
from ..core.policy import Policy
from ..core.text import clean
from ..ledger import EventKind, Ledger, LedgerUnwritable
from ..market.errors import ApiError, AuthError, MarketUnavailable
from ..market.protocol import Market
from .actions import Actions
from .attempt import Attempt
from .blame_book import BlameBook
from .cadence import Cadence
from .deciding import Decider
from .ending import end_campaign
from .executor import Executor, Outcome
from .fleet import Fleet
from .hosts.link import HostLink
from .hosts.ssh import SSHRunner
from .hosts.tender import HostTender
from .intents import AFTER_END, AutomationRefused, DestroyConfirmation, EndIntent, Intent, Reply
from .jobs.work import JobWork
from .journal import Journal
from .observer import Observer
from .offers import OfferBook
from .operator import Operator
from .prices import PriceWatch
from .recovery import Recovery
from .release import release
from .rounds import rounds
from .tier import TierWatch

__all__ = ["AutomationRefused", "DestroyConfirmation", "Outcome", "Supervisor"]  # re-exported
K = EventKind
CLOSE_TRIES, CLOSE_WAIT_S = 4, 2.0  # cancels of a host task at close, and the wait after each


class Supervisor:
    def __init__(
        self,
        market: Market,
        ledger: Ledger,
        campaign: Campaign,
        policy: Policy,
        ssh: SSHRunner,
        log: Callable[[str], None] = print,
        max_parallel_ssh: int = 8,
        adopt_all: bool = False,
        artifacts_root: Path = Path("artifacts"),
        observe_only: bool = False,
    ) -> None:
        self.market = market
        self.ledger = ledger
        self.file_campaign = campaign  # as read; the wanted fleet lives in `fleet.wanted`
        self.policy = policy
        self.ssh = ssh
        self.fleet = Fleet(campaign.fleet)
        self.journal = Journal(ledger, campaign.name, market, log)
        self.writer = self.journal.writer  # the one queue of rental updates, which `rounds` drains
        # (actor, reason) once a person ended the campaign (`no_more_creates`)
        self.ended_by: tuple[str, str] | None = None
        self.actions = Actions(
            market, self.journal, self.fleet, campaign, lambda: self.ended_by, gone=ssh.forget
        )
        self.link = HostLink(
            ssh, market, self.journal, max_parallel_ssh, policy_io_floor_s=policy.io_floor_wall_s
        )
        self.blame_book = BlameBook(self.journal, campaign)  # whose fault: host or campaign
        self.job_work = JobWork(
            JobQueue(campaign.jobs),
            self.fleet,
            self.link,
            self.journal,
            market,
            artifacts_root,
            uploads=campaign.upload,
            blame_book=self.blame_book,
            by_work=policy.rank == "expected_cost",  # biggest jobs, fastest hosts
            market=market,  # a moved job's state copied off its paused rental
        )
        self.tender = HostTender(
            self.link, self.job_work, self.journal, policy, market, campaign, self.blame_book
        )
        self.recovery = Recovery(
            market,
            ledger,
            self.journal,
            self.fleet,
            campaign,
            policy,
            ssh,
            self.actions,
            adopt_all,
        )
        self.finished: Outcome | None = None
        self.polls = 0
        self.detach_asked = False  # the operator's shutdown-and-detach (controller API)
        self.listeners: list[Callable[[], None]] = []  # told after each poll
        # told as each poll begins; first, what the team store says (the replica as the team
        # sync last left it: a teammate's quarantine reaches the next create)
        self.before_poll: list[Callable[[], None]] = [
            lambda: self.fleet.heed_team(self.ledger, self.policy, self.now())
        ]
        self.offer_book = OfferBook(market, ledger, self.journal, self.fleet, campaign, policy)
        self.cadence = Cadence(market, self.fleet, policy, self.journal)  # each poll's lists
        self.operator = Operator(
            self.actions, self.fleet, self.offer_book, self.journal, policy.name
        )
        self.tier = TierWatch(
            market, self.journal, self.fleet, self.job_work, self.actions, campaign, policy.name
        )
        # outbids and resumes are seen in the list answer
        self.observer = Observer(
            market, self.journal, self.fleet, policy, ssh, self.blame_book, self.tier
        )
        self.executor = Executor(
            market,
            self.fleet,
            self.journal,
            self.actions,
            self.blame_book,
            self.offer_book,
            self.operator,
            self.tender,
            ssh,
            policy,
            self.tier,
        )
        self.prices = PriceWatch(
            market,
            self.journal,
            self.fleet,
            self.job_work,
            self.actions,
            self.offer_book,
            campaign,
            policy,
        )  # hosts' price increases (core/worth/price_increase.py)
        self.started_at: float | None = None  # the campaign's first start, read once
        # watch without a campaign: nothing is supervised unless the operator hands it over
        self.observe_only = observe_only
        self.failure: str | None = None  # why polling fails now (a rejected key), for the header
        self.decider = Decider(
            market,
            policy,
            self.fleet,
            self.job_work,
            self.offer_book,
            self.blame_book,
            self.tier,
            self.link,
            lambda: self.campaign,
            lambda: self.started_at,
        )

    # -- read-only views for the engine, the snapshot and tests ------------------------------
    @property
    def campaign(self) -> Campaign:
        """The campaign as it stands: the file's, with the fleet the operator wants now, and no
        create left once a person ended it."""
        now = self.file_campaign
        if now.fleet != self.fleet.wanted:
            now = dataclasses.replace(now, fleet=self.fleet.wanted)
        if self.ended_by is not None and now.max_creates > self.fleet.creates:
            now = dataclasses.replace(now, max_creates=self.fleet.creates)
        return now

    @property
    def attempts(self) -> dict[int, Attempt]:
        return self.fleet.attempts

    @property
    def jobs(self) -> JobQueue:
        return self.job_work.queue

    def now(self) -> float:
        return self.market.now()

    def poll_wait(self, cap: float, floor: float) -> float:
        """Wall seconds until the next poll (the campaign's poll interval, in market time)."""
        return min(cap, self.link.wall(self.campaign.poll_s, floor))

    def held(self) -> list[Attempt]:
        return self.fleet.held()

    # -- start: quarantine, key, reconcile, adopt -------------------------------------------
    async def prepare(self) -> None:
        """After the session synced the clock: the campaign's start, its quarantine and
        creates so far, the SSH key, jobs re-attached, and a reconcile that adopts what lives."""
        now = self.now()
        name = self.campaign.name
        # the last sign of life of an earlier run of this campaign: what it held was watched
        # until then, and unwatched from then until this start adopts it
        self.recovery.last_alive = self.ledger.last_event_at(name)
        self.journal.fact(
            K.CAMPAIGN_START,
            None,
            at=now,
            reason=f"campaign {name} under policy {self.policy.name}",
            detail={
                "policy": self.policy.name,
                "fleet": self.campaign.fleet,
                "market": self.market.base_url,  # whose rentals these are
                "jobs": [j.name for j in self.campaign.jobs],  # `rentwatch jobs` lists them
            },
        )
        self.started_at = self.ledger.campaign_started_at(name)
        if note := self.ledger.fallback_note:  # an earlier run's events the disk did not take
            self.journal.fact(K.NOTE, None, at=now, reason=note)
            self.journal.say(f"ledger {note}")
        self.fleet.restore(self.ledger, name, self.policy, now)
        await self.market.add_ssh_key(self.ssh.public_key)
        await self.link.calibrate()
        self.job_work.restore(self.ledger)
        self.tier.restore(self.ledger, now)  # the tier's outbid record, every campaign
        self.blame_book.restore(self.ledger)
        await self.recovery.reconcile()
        self.prices.restore(self.ledger)  # increases accepted, not yet in force
        for a in self.fleet.in_service():  # adopted proven rentals: watch them, re-attach jobs
            if a.tend_task is None:
                self.tender.tend_from_now(a)

    # -- the poll: observe, decide, execute ---------------------------------------------------
    async def poll_once(self) -> list[Decision]:
        if why := self.ledger.unwritable:  # nothing more without a ledger: the end releases
            raise LedgerUnwritable(f"{self.ledger.path}: {why}; the campaign stops here")
        self.writer.drain()  # what host tasks emitted before this poll
        for fn in self.before_poll:
            fn()
        try:
            sight = await self.cadence.fetch()
        except AuthError as exc:
            self.failure = f"the marketplace rejected the API key: {exc}"
            raise
        except (MarketUnavailable, MalformedAnswer) as exc:
            self.journal.say(f"poll   market unavailable this round: {exc}")
            return []
        except ApiError as exc:  # refused (a 4xx): said, and the next poll asks again
            self.journal.say(f"poll   market refused this round's list: {exc}")
            return []
        self.failure = None
        now = self.market.answered_at()
        self.polls += 1
        self.prices.apply_due(now)  # an accepted increase's new price, before the rows show it
        await self.observer.observe(sight, now)
        self.recovery.adopt_strays(sight.rows, now)
        # a host no longer held running (stopped, destroyed, lost, let go) keeps no connection
        self.ssh.keep_only([i for i, a in self.fleet.attempts.items() if a.life.phase in HELD])
        self.tender.retend(self.observer.returned)
        self._revive_tending(now)
        self.writer.drain()  # the rules decide on what host tasks said while the list was out
        decisions = await self.decider.decide(now)
        for d in decisions:
            self.writer.drain()
            done = await self.executor.execute(d)
            # (watching without a campaign has no goal to reach: it never "finishes", so
            # the operator's keys are never refused as coming after the campaign's end)
            if done is not None and not self.observe_only and self.finish(done):
                self.journal.say(f"done   {done.reason}")
        await self.prices.look(now)
        self.writer.drain()
        self.job_work.reap(now)
        await self.job_work.dispatch(now)
        # what the ledger's figures compute to, on this market's clock
        self.ledger.tick(self.market.answered_at(), self.market.base_url)
        for fn in self.listeners:
            fn()
        return decisions

    def _revive_tending(self, now: float) -> None:
        """A proven host whose tending ended by an error while still in service is tended again,
        said in the ledger: an untended host has a watchdog nobody feeds."""
        for a in self.fleet.in_service():
            t = a.tend_task
            # (in service: verified now; an untrusted host's tending ends on purpose)
            if t is None or not t.done() or t.cancelled() or t.exception() is None or a.untrusted:
                continue
            exc = t.exception()
            self.journal.fact(
                K.NOTE,
                a,
                at=now,
                reason=f"tending i:{a.instance_id} ended: {type(exc).__name__}: "
                f"{clean(str(exc), 200)}; tended again",
                detail={"task": "tend", "error": type(exc).__name__},
            )
            self.journal.say(f"error  tending i:{a.instance_id} ended ({exc!r}): tended again")
            self.tender.tend_from_now(a)

    # -- the run and its end ------------------------------------------------------------------
    async def run(self) -> Outcome:
        """Poll until the rules finish the campaign (the session prepares and ends it)."""
        await rounds(self, lambda: self.finished is not None, wake=self.cadence.wake)
        assert self.finished is not None
        return self.finished

    def finish(self, outcome: Outcome) -> bool:
        """The campaign is over: the first outcome stands (True), a later one is ignored (False)."""
        if self.finished is not None:
            return False
        self.finished = outcome
        return True

    def shut_down(self, detach: bool, reason: str) -> None:
        """The operator's shutdown through the controller: the run ends, and with `detach`
        its end leaves the fleet running (each rental recorded as detached)."""
        self.detach_asked = self.detach_asked or detach
        self.finish(Outcome(True, reason))

    def no_more_creates(self, actor: str, reason: str) -> None:
        """A person ended the campaign: no poll rents again (`campaign` has no create left); a
        create in flight is ended as it lands."""
        self.ended_by = (actor, reason)

    async def release_all(self, actor: str, reason: str) -> None:
        """Leave nothing billing GPU time: stop what passed (or was trusted), destroy the rest;
        creates in flight answered and the market's rentals under our label included."""
        for task in self._tasks():
            task.cancel()
        await self.job_work.campaign_ended(reason, keep_output=actor != "trap")
        await self.recovery.hold_strays("release", True)
        await release(self, self.fleet.held(), actor, reason, keep_proven=True)

    async def detach_all(self, reason: str) -> None:
        for a in self.fleet.held():
            self.journal.fact(K.DETACHED, a, actor="human", reason=reason)

    # -- operator intents ---------------------------------------------------------------------
    async def apply(self, intent: Intent) -> Reply:
        """The one door for a person's intent, run on the poll's task between two polls. After the
        end only `AFTER_END` is taken; an instance named must be held; a destroy needs its id
        typed, an end and destroy the campaign's name. A refusal comes back in the reply; a failed
        market call is raised."""
        return await self.writer.run(lambda: self._apply(intent))

    async def _apply(self, intent: Intent) -> Reply:
        if self.finished is not None and not isinstance(intent, AFTER_END):
            return Reply.refusal(
                f"the campaign has ended ({self.finished.reason}): it starts and takes over "
                "nothing new; stop, destroy and end still work on what it holds"
            )
        iid = getattr(intent, "instance_id", None)
        if iid is not None and iid not in self.attempts:
            return Reply.refusal(f"instance {iid} is not held by this campaign", not_held=True)
        try:
            if isinstance(intent, EndIntent):
                return await end_campaign(self, intent.destroy, intent.typed)
            return await self.operator.apply(intent)
        except AutomationRefused as exc:
            return Reply.refusal(str(exc))

    def _tasks(self) -> list[asyncio.Task[None]]:
        return [
            t for a in self.fleet.attempts.values() for t in (a.preflight_task, a.tend_task) if t
        ]

    async def close(self) -> None:
        """Every host task cancelled and waited for; one that lost its cancel (Python 3.11's
        `wait_for`) is cancelled again, and one that still will not end is left, said, so an exit
        never hangs. A cancel of close itself reaches its caller."""
        tasks = self._tasks()
        for task in tasks:
            task.cancel()
        pending = set(tasks)
        for _ in range(CLOSE_TRIES):
            if not pending:
                break
            _, pending = await asyncio.wait(pending, timeout=CLOSE_WAIT_S)
            for t in pending:
                t.cancel()
        if pending:
            self.journal.say(f"close  {len(pending)} host task(s) would not end: left behind")
        # the tasks' own errors are theirs (each has said it)
        await asyncio.gather(*(t for t in tasks if t not in pending), return_exceptions=True)
        await self.ssh.close()
