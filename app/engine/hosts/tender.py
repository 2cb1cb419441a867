"""The host tender: the compute preflight of a running attempt, then, on a proven host, the
watchdog, its heartbeat, NVML samples and the job's check-ins."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from ...core.campaign import Campaign
from ...core.jobs import JobState
from ...core.lifecycle import Phase
from ...core.policy import Policy
from ...core.preflight.checks import xid_check
from ...core.preflight.verdict import finite
from ...core.preflight.vitals import read_vitals
from ...core.rules import low_util_since
from ...core.text import clean
from ...ledger import EventKind
from ...market.protocol import Clock
from ..attempt import Attempt
from ..blame_book import BlameBook
from ..jobs.work import JobWork
from ..journal import Journal
from ..rounds import raise_if_cancelled
from ..updates import Broken, Sampled, Set, WentSilent
from .link import HostLink
from .preflight_run import PreflightRunner
from .probe_io import (
    HEARTBEAT,
    SAMPLER_COMMAND,
    failure_text,
    parse_probe_output,
    probe_source,
    watchdog_command,
)
from .ssh import SSHFailure

K = EventKind
SAMPLE_FIELDS = ("util", "sm_clock", "max_sm_clock", "reasons_bits")

NOTE_EVERY = 30  # failed looks in a row at a proven host between two ledger notes of them
MAX_SAMPLES = 60  # NVML samples read from one sampler document (it sends a handful)


def sample_value(field: str, value: Any) -> float | int | None:
    """One NVML field as the ledger's samples table holds it: a finite number (DOUBLE), the
    reasons bit mask an integer a BIGINT holds; anything else none."""
    if field == "reasons_bits":
        ok = type(value) is int and 0 <= value < 2**63
        return value if ok else None
    return finite(value)


WATCHDOG_FLOORS = 10  # the watchdog's window is at least this many I/O floors of wall time


class HostTender(PreflightRunner):
    watchdog_window_s = 15 * 60.0  # market seconds of silence: the host stops itself
    beat_s = 120.0  # market seconds between heartbeats (and NVML samples)
    job_poll_s = 30.0  # market seconds between looks at a running job

    def __init__(
        self,
        link: HostLink,
        jobs: JobWork,
        journal: Journal,
        policy: Policy,
        clock: Clock,
        campaign: Campaign,
        blame_book: BlameBook,
    ) -> None:
        super().__init__(link, journal, policy, clock, campaign, blame_book)
        self.jobs = jobs
        self._look_failures: dict[int, int] = {}  # failed looks in a row, per instance
        self._vitals_dropped: dict[int, frozenset[str]] = {}  # what was last noted, per instance

    # -- proven hosts: watchdog, heartbeat, NVML samples, jobs -------------------------------
    def retend(self, returned: list[Attempt]) -> None:
        """Tend again a proven rental held again after its write-off (the observer's list)."""
        for a in returned:
            if a.life.phase == Phase.VERIFIED and (a.tend_task is None or a.tend_task.done()):
                self.tend_from_now(a)
        returned.clear()

    def tend_from_now(self, a: Attempt) -> None:
        """Tended from now (in service again): silence counts from its next unanswered look."""
        task = asyncio.create_task(self.tend(a))
        self.journal.writer.emit(Set(a, {"tend_task": task, "silent_since": None}))

    async def tend(self, a: Attempt) -> None:
        """Arm the host's watchdog, then beat its heartbeat, read its GPU and look at its job. A
        look that fails unexpectedly is a failed sample and tending goes on. The heartbeat keeps
        its own time: a heartbeat that waited for a long artifact pull let the watchdog stop the
        host it was being pulled from."""
        await self._guarded(a, "arming the watchdog", self._arm_watchdog(a))
        beating = asyncio.create_task(self._keep_beating(a))
        try:
            while self._in_service(a):
                raise_if_cancelled()
                job = self._job_on(a)
                await asyncio.sleep(self.link.wall(self.job_poll_s if job else self.beat_s, 0.05))
                if not self._in_service(a):
                    break
                if a.ssh_host is None:
                    # a list answer without the host's SSH route is no answer: wait for the
                    # next one (leaving would leave its job unwatched until the deadline)
                    continue
                job = self._job_on(a)
                if job is not None:
                    await self._guarded(a, f"checking job {job.name}", self.jobs.check(a, job))
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)

    @staticmethod
    def _in_service(a: Attempt) -> bool:
        return a.life.phase == Phase.VERIFIED and not a.untrusted

    def _job_on(self, a: Attempt) -> JobState | None:
        return self.jobs.queue.on(a.instance_id) or self.jobs.queue.on(a.instance_id, "finishing")

    async def _keep_beating(self, a: Attempt) -> None:
        """The heartbeat and an NVML sample every `beat_s` market seconds while in service."""
        last = self.clock.now()  # the arming touched the heartbeat
        while self._in_service(a):
            raise_if_cancelled()
            due = last + self.beat_s - self.clock.now()
            await asyncio.sleep(self.link.wall(max(due, 0.0), 0.05))
            if not self._in_service(a) or a.ssh_host is None:
                continue  # no route in the last list answer: the next look tries again
            if self.clock.now() - last < self.beat_s:
                continue
            last = self.clock.now()
            if await self._guarded(a, "sampling", self._beat_and_sample(a)):
                self._look_failures.pop(a.instance_id, None)

    async def _beat_and_sample(self, a: Attempt) -> None:
        await self._beat(a)
        res = await self.link.run(a, SAMPLER_COMMAND, stdin=probe_source("nvml_sample"))
        doc = parse_probe_output(res.stdout, "nvml_sample", res.truncated)
        self.take_samples(a, doc)
        await self.check_xid(a, doc)

    async def _guarded(self, a: Attempt, what: str, look: Awaitable[object]) -> bool:
        """One look at a proven host, whatever it raises: True when it went through; a failure is a
        failed sample, noted in the ledger once per streak."""
        try:
            await look
        except asyncio.CancelledError:
            raise
        except SSHFailure as exc:
            self.journal.say(f"{what} on i:{a.instance_id}: no answer ({exc})")
            # the next poll asks the market; the rules time it
            self.journal.writer.emit(WentSilent(a, self.clock.now()))
            return False
        except Exception as exc:  # noqa: BLE001 - supervision: the tending outlives any look
            said = failure_text(exc)
            self.journal.say(f"sample i:{a.instance_id} failed: {what}: {said}")
            streak = self._look_failures.get(a.instance_id, 0) + 1
            self._look_failures[a.instance_id] = streak
            if streak == 1 or streak % NOTE_EVERY == 0:
                self.journal.fact(
                    K.NOTE,
                    a,
                    ok=False,
                    reason=f"{what} failed ({streak} in a row): {said}",
                    detail={"class": "sample_failed", "streak": streak},
                )
            return False
        return True  # silence is the link's to judge, by answers (`HostLink.run`)

    async def _beat(self, a: Attempt) -> None:
        """The heartbeat, and the watchdog it feeds armed again (with a ledger note) if gone."""
        if a.watchdog_armed:
            res = await self.link.run(a, HEARTBEAT)
            said = res.stdout.decode("utf-8", errors="replace").split()
            if said[-2:] != ["WATCHDOG", "gone"]:
                return  # alive, or an answer that says nothing: the next beat looks again
            self.journal.writer.emit(Set(a, {"watchdog_armed": False}))
            why = "the host's watchdog was not running"
        else:
            why = "the watchdog could not be armed before"  # noted once it is
        armed = await self._arm_watchdog(a)
        if armed or why.startswith("the host's"):
            self.journal.fact(
                K.NOTE,
                a,
                ok=armed,
                reason=f"{why}: " + ("armed again" if armed else "could not arm it"),
                detail={"class": "watchdog_rearmed"},
            )

    async def _arm_watchdog(self, a: Attempt) -> bool:
        # the window in wall seconds never falls under WATCHDOG_FLOORS I/O floors: on a fast
        # clock a loaded controller's beats come late in market time (not a dead controller)
        scale = self.link.market.time_scale
        window = max(self.watchdog_window_s, WATCHDOG_FLOORS * self.link.io_floor() * scale)
        try:
            await self.link.run(a, watchdog_command(window, scale), stdin=probe_source("watchdog"))
            self.journal.writer.emit(Set(a, {"watchdog_armed": True}))
            self.journal.say(
                f"watch  i:{a.instance_id} watchdog armed: stops itself after "
                f"{window / 60:.0f} min without a heartbeat"
            )
            return True
        except SSHFailure as exc:
            self.journal.say(f"watch  i:{a.instance_id} could not arm the watchdog: {exc}")
            return False

    async def check_xid(self, a: Attempt, doc: dict[str, object]) -> None:
        """A fatal XID (the GPU fell off the bus, double-bit ECC) in the sampler's events: the
        GPU is broken under load, so the instance is stopped and its machine quarantined."""
        if not self.policy.checks.xid:
            return
        found = xid_check(doc)
        if found.ok is not False:
            return
        detail = {"class": found.failure_class, "xid": found.measured}
        why = found.reason
        self.journal.writer.emit(Broken(a, "rule:xid", why, found.failure_class or "xid", detail))

    def take_samples(self, a: Attempt, doc: dict[str, object]) -> None:
        """The sampler's readings, each field a finite number in its column's range or none
        (a host's document may hold any JSON), then the idle and throttle evidence."""
        now = self.clock.now()
        rows = []
        dropped: set[str] = set()
        raw = doc.get("samples")
        for smp in raw[:MAX_SAMPLES] if isinstance(raw, list) else []:
            if not isinstance(smp, dict):
                continue
            row: dict[str, Any] = {k: sample_value(k, smp.get(k)) for k in SAMPLE_FIELDS}
            vitals, why = read_vitals(smp)
            row.update(vars(vitals))
            dropped.update(why)
            reasons = smp.get("reasons")
            row.update(
                instance_id=a.instance_id,
                ts=now,
                reasons=[
                    clean(r, 40)
                    for r in (reasons if isinstance(reasons, list) else [])[:10]
                    if isinstance(r, str)
                ],
            )
            rows.append(row)
        self._note_dropped(a, now, frozenset(dropped))
        if not rows:
            return
        self.journal.samples(rows)
        util = rows[0]["util"]
        known = isinstance(util, int | float)
        since = low_util_since(a.util_low_since, float(util), self.policy, now) if known else None
        ratio = self.policy.throttle_ratio
        self.journal.writer.emit(Sampled(a, now, rows, since, known, ratio))

    def _note_dropped(self, a: Attempt, now: float, dropped: frozenset[str]) -> None:
        """Vital signs a host reported that could not be believed: said in the log each time,
        and in the ledger when what is dropped changes (not at every sample)."""
        if dropped:
            self.journal.say(f"sample i:{a.instance_id} dropped: {'; '.join(sorted(dropped))}")
        if dropped == self._vitals_dropped.get(a.instance_id, frozenset()):
            return
        self._vitals_dropped[a.instance_id] = dropped
        if dropped:
            self.journal.fact(
                K.NOTE,
                a,
                at=now,
                ok=False,
                reason="vital signs not believed: " + clean("; ".join(sorted(dropped)), 300),
                detail={
                    "class": "vitals_dropped",
                    "fields": sorted(d.split(":")[0] for d in dropped),
                },
            )
