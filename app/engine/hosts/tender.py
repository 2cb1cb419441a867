"""The host tender: what the engine does on a rented host over SSH, apart from jobs. The
compute preflight of a running attempt; then, on a proven host, the dead-man's switch
(watchdog), its heartbeat, NVML samples (throttle and idle evidence) and the job's check-ins."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from ...core.blame import Failure, Party, Stage, blame, probe_blame
from ...core.campaign import Campaign
from ...core.host_checks import deep_checks, first_failure, xid_check
from ...core.lifecycle import Phase
from ...core.policy import Policy
from ...core.rules import low_util_since
from ...core.verdict import Verdict, detect_throttle, finite, preflight_verdict
from ...ledger import EventKind
from ...market.protocol import Clock
from ..attempt import Attempt
from ..blame_book import BlameBook
from ..jobs.work import JobWork
from ..journal import Journal
from ..rounds import raise_if_cancelled
from .link import HostLink
from .probe_io import (
    NET_PROBE_URL,
    ProbeError,
    bounded,
    failure_text,
    new_nonce,
    parse_probe_output,
    preflight_command,
    probe_run_text,
    probe_source,
    sampler_command,
    shown_text,
    watchdog_command,
)
from .ssh import HostKeyChanged, RunResult, SSHFailure

K = EventKind
# told of a proven host that must be stopped and marked: (attempt, rule, reason, failure class)
SAMPLE_FIELDS = (
    "util",
    "sm_clock",
    "max_sm_clock",
    "reasons_bits",
    "temp",
    "power_w",
    "mem_used_mb",
)


SILENT_RETRIES = 3  # preflight sessions in a row without an answer before they count against it
# the heartbeat, and whether the watchdog it feeds still runs (its pid file, signal 0)
HEARTBEAT = (
    "touch ~/.rentwatch/heartbeat && { [ -f ~/.rentwatch/watchdog.pid ]"
    " && kill -0 $(cat ~/.rentwatch/watchdog.pid) 2>/dev/null"
    " && echo WATCHDOG alive || echo WATCHDOG gone; }"
)
NOTE_EVERY = 30  # failed looks in a row at a proven host between two ledger notes of them
MAX_SAMPLES = 60  # NVML samples read from one sampler document (it sends a handful)


def no_answer(res: RunResult) -> bool:
    """A session that ended without the host's answer: nothing on stdout (the probe always
    prints its JSON line, even when CUDA fails) and either no exit status (the channel was cut)
    or nothing on stderr either (a shell that says why, say `python3: not found`, answered)."""
    return (
        not res.truncated
        and not res.stdout.strip()
        and (res.exit_status is None or not res.stderr.strip())
    )


def sample_value(field: str, value: Any) -> float | int | None:
    """One NVML field as the ledger's samples table holds it: a finite number (DOUBLE), the
    reasons bit mask an integer a BIGINT holds; anything else none."""
    if field == "reasons_bits":
        ok = type(value) is int and 0 <= value < 2**63
        return value if ok else None
    return finite(value)


WATCHDOG_FLOORS = 10  # the watchdog's window is at least this many I/O floors of wall time


class HostTender:
    def __init__(
        self,
        link: HostLink,
        jobs: JobWork,
        journal: Journal,
        policy: Policy,
        clock: Clock,
        campaign: Campaign | None = None,
        blame_book: BlameBook | None = None,
        watchdog_window_s: float = 15 * 60.0,
        beat_s: float = 120.0,
        job_poll_s: float = 30.0,
    ) -> None:
        self.link = link
        self.jobs = jobs
        self.journal = journal
        self.policy = policy
        self.clock = clock
        self.campaign = campaign  # its image and disk, which the preflight holds hosts to
        self.blame_book = blame_book
        self.watchdog_window_s = watchdog_window_s  # market seconds of silence: host stops itself
        self.beat_s = beat_s  # market seconds between heartbeats (and NVML samples)
        self.job_poll_s = job_poll_s  # market seconds between looks at a running job
        self._look_failures: dict[int, int] = {}  # failed looks in a row, per instance

    # -- preflight ---------------------------------------------------------------------------
    def start_preflight(self, a: Attempt) -> None:
        if a.life.phase == Phase.RUNNING:
            self.journal.move(a, Phase.VERIFYING, self.clock.now(), "preflight started")
        a.preflight_running(asyncio.create_task(self._preflight(a)))

    async def _preflight(self, a: Attempt) -> None:
        """The preflight's tries, supervised: whatever ends them without a verdict (an
        exception no try expected, from the host's answer or from the controller's side)
        becomes one, `bad_probe`, with its ledger event, so no rental is left unjudged."""
        try:
            await self._preflight_tries(a)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - supervision: every failure ends in a verdict
            verdict = Verdict(
                False, "bad_probe", f"preflight ended without a verdict: {failure_text(exc)}"
            )
            a.judged(verdict)
            self._preflight_failed(a, verdict, {})
            return
        if (
            a.verdict is not None
            and not a.verdict.ok
            and a.verdict.failure_class != "campaign_fault"
        ):
            self._preflight_failed(a, a.verdict, a.preflight_doc or {})

    async def _preflight_tries(self, a: Attempt) -> None:
        dropped = 0
        while True:
            nonce = new_nonce()  # fresh for every try: an answer is to this run, none other
            command = preflight_command(self.policy.checks, NET_PROBE_URL, nonce)
            if a.ssh_host is None or a.ssh_port is None:
                a.ssh_waiting("no SSH port published yet")
                await asyncio.sleep(self.link.wall(10, 0.05))
                continue
            if not dropped and (a.ssh_error is None or a.ssh_error.startswith("no SSH port")):
                a.ssh_waiting(f"no answer yet from {a.ssh_host}:{a.ssh_port}")
            try:
                script = probe_source("preflight")
                res = await self.link.probe(
                    a, script, self.link.wall(self.policy.preflight_timeout_s, 5.0), command
                )
            except HostKeyChanged as exc:
                a.judged(Verdict(False, "host_key_changed", str(exc)))
                return
            except SSHFailure as exc:
                if "did not finish" in str(exc):
                    a.judged(Verdict(False, "timeout", f"preflight hung: {exc}"))
                    return
                a.ssh_failed(str(exc))
                await asyncio.sleep(self.link.wall(10, 0.05))
                continue
            except OSError as exc:
                # the controller's own side (out of descriptors, say): no word on the host;
                # tried again until the preflight's deadline rule gives up on the attempt
                a.ssh_failed(f"controller could not try: {failure_text(exc)}")
                await asyncio.sleep(self.link.wall(10, 0.05))
                continue
            a.ssh_reached()
            if no_answer(res) and (res.exit_status is None or dropped < SILENT_RETRIES):
                # a session cut before the probe answered says nothing about the host: look
                # again. A cut channel is retried until the SSH deadline rule gives up on the
                # host; a clean exit with nothing said at all is judged after a few tries.
                dropped += 1
                a.ssh_failed(
                    f"{dropped} preflight sessions in a row ended without an answer"
                    if res.exit_status is None and dropped >= SILENT_RETRIES
                    else None
                )
                await asyncio.sleep(self.link.wall(10, 0.05))
                continue
            a.probe_answered()
            if self._campaign_fault(a, res.exit_status, res.stdout, res.stderr):
                return
            try:
                doc = parse_probe_output(res.stdout, "preflight", res.truncated)
            except ProbeError as exc:
                a.judged(Verdict(False, "bad_probe", str(exc)))
                return
            verdict = preflight_verdict(
                doc,
                a.gpu_name,
                self.policy.min_speed_share,
                self.policy.check_gpu_name,
                checks=self.policy.checks,
                nonce=nonce,
            )
            a.judged(verdict, doc)
            if verdict.ok:
                if self.blame_book is not None:
                    self.blame_book.probe_passed(a)  # the image has what the probe needs
                self._deep_checks(a, doc)
            return

    def _preflight_failed(self, a: Attempt, verdict: Verdict, doc: dict[str, Any]) -> None:
        self.journal.fact(
            K.PREFLIGHT_FAILED,
            a,
            actor="rule:preflight",
            reason=verdict.reason,
            ok=False,
            detail={
                "class": verdict.failure_class,
                "tflops": verdict.tflops,
                "probe": bounded({k: doc.get(k) for k in ("device", "matmul", "error", "total_s")}),
            },
        )

    def _campaign_fault(
        self, a: Attempt, exit_status: int | None, stdout: bytes, stderr: bytes
    ) -> bool:
        """The probe could not run for what looks like the image's lack (no python3, no torch
        where it was needed), judged on the campaign's evidence (app/core/blame.py): the
        campaign's on two machines and none verified with the image (the host is spared and
        creates stop), suspected on one (the host is spared), the host's own once a preflight
        with the image computed elsewhere (a `bad_probe`, as any host that cannot run it)."""
        text = probe_run_text(stdout, stderr)
        if text is None or probe_blame(text, exit_status) is None:
            return False
        machine = a.machine_id or -a.instance_id
        if self.blame_book is not None:
            found = self.blame_book.judge(a, Stage.PROBE, text, exit_status)
        else:
            found = blame(
                Failure(
                    machine,
                    self.campaign.image if self.campaign else "",
                    Stage.PROBE,
                    text,
                    exit_status,
                )
            )
        if found.party is Party.HOST:
            a.judged(Verdict(False, "bad_probe", found.reason))
            return True
        a.judged(Verdict(False, "campaign_fault", found.reason))
        self.journal.fact(
            K.PREFLIGHT_FAILED,
            a,
            actor="rule:blame",
            reason=found.reason,
            ok=False,
            detail={"class": "campaign_fault", "cause": found.cause, "blame": str(found.party)},
        )
        return True

    def _deep_checks(self, a: Attempt, doc: dict[str, object]) -> None:
        """What one matmul does not exercise (PCIe link, VRAM, disk, download, XID), against
        the offer as listed: the first measured shortfall fails the host."""
        offer = a.offer
        listed = {
            "gpu_name": a.gpu_name,
            "gpu_ram": offer.gpu_ram_mb if offer else None,
            "disk_bw": offer.disk_bw if offer else None,
            "inet_down": offer.inet_down if offer else None,
        }
        disk = self.campaign.disk_gb if self.campaign else None
        bad = first_failure(deep_checks(doc, listed, disk, self.policy.checks))
        if bad is None or a.verdict is None:
            return
        a.judged(
            Verdict(
                False,
                bad.failure_class or bad.name,
                bad.reason,
                a.verdict.tflops,
                a.verdict.expected,
            )
        )

    # -- proven hosts: watchdog, heartbeat, NVML samples, jobs -------------------------------
    def retend(self, returned: list[Attempt]) -> None:
        """Tend again a proven rental held again after its write-off (the observer's list)."""
        for a in returned:
            if a.life.phase == Phase.VERIFIED and (a.tend_task is None or a.tend_task.done()):
                a.tended_by(asyncio.create_task(self.tend(a)))
        returned.clear()

    async def tend(self, a: Attempt) -> None:
        """Arm the host's dead-man's switch, then beat its heartbeat and read its GPU.
        Supervised: a look that fails in a way nobody expected (a host's hostile answer, a
        bug) is a failed sample with a ledger note, and the tending goes on; only the rental
        leaving service ends it."""
        await self._guarded(a, "arming the watchdog", self._arm_watchdog(a))
        last_beat = -1e18
        while a.life.phase == Phase.VERIFIED and not a.untrusted:
            raise_if_cancelled()
            job = self.jobs.queue.on(a.instance_id)
            await asyncio.sleep(self.link.wall(self.job_poll_s if job else self.beat_s, 0.05))
            if a.life.phase != Phase.VERIFIED or a.untrusted:
                break
            if a.ssh_host is None:
                # a list answer without the host's SSH route is no answer: wait for the next
                # one (leaving would leave its job unwatched until the campaign's deadline)
                continue
            job = self.jobs.queue.on(a.instance_id)
            if job is not None:
                await self._guarded(a, f"checking job {job.name}", self.jobs.check(a, job))
            if self.clock.now() - last_beat < self.beat_s:
                continue
            last_beat = self.clock.now()
            if await self._guarded(a, "sampling", self._beat_and_sample(a)):
                self._look_failures.pop(a.instance_id, None)

    async def _beat_and_sample(self, a: Attempt) -> None:
        await self._beat(a)
        res = await self.link.run(a, sampler_command(), stdin=probe_source("nvml_sample"))
        doc = parse_probe_output(res.stdout, "nvml_sample", res.truncated)
        self.take_samples(a, doc)
        await self.check_xid(a, doc)

    async def _guarded(self, a: Attempt, what: str, look: Awaitable[None]) -> bool:
        """One look at a proven host, whatever it raises: True when it went through. A
        session without an answer is said in the log; anything else (a host's unreadable
        document, an error of ours) is a failed sample, noted in the ledger once per streak."""
        try:
            await look
        except asyncio.CancelledError:
            raise
        except SSHFailure as exc:
            self.journal.say(f"{what} on i:{a.instance_id}: no answer ({exc})")
            a.went_silent(self.clock.now())  # the next poll asks the market; the rules time it
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
                    actor="engine",
                    ok=False,
                    reason=f"{what} failed ({streak} in a row): {said}",
                    detail={"class": "sample_failed", "streak": streak},
                )
            return False
        a.answered()
        return True

    async def _beat(self, a: Attempt) -> None:
        """The heartbeat, and a look at the watchdog it feeds (issue 30, item 7): one that is
        gone (an OOM kill, a job that killed it) or was never armed is armed again, with a
        ledger note; a host cannot be trusted to stop itself with nothing watching."""
        if a.watchdog_armed:
            res = await self.link.run(a, HEARTBEAT)
            said = res.stdout.decode("utf-8", errors="replace").split()
            if said[-2:] != ["WATCHDOG", "gone"]:
                return  # alive, or an answer that says nothing: the next beat looks again
            a.watchdog_seen(False)
            why = "the host's watchdog was not running"
        else:
            why = "the watchdog could not be armed before"  # noted once it is
        await self._arm_watchdog(a)
        if a.watchdog_armed or why.startswith("the host's"):
            self.journal.fact(
                K.NOTE,
                a,
                actor="engine",
                ok=a.watchdog_armed,
                reason=f"{why}: " + ("armed again" if a.watchdog_armed else "could not arm it"),
                detail={"class": "watchdog_rearmed"},
            )

    async def _arm_watchdog(self, a: Attempt) -> None:
        # the window in wall seconds never falls under WATCHDOG_FLOORS I/O floors: on a fast
        # clock a loaded controller's beats come late in market time (not a dead controller)
        scale = self.link.market.time_scale
        window = max(self.watchdog_window_s, WATCHDOG_FLOORS * self.link.io_floor() * scale)
        try:
            await self.link.run(a, watchdog_command(window, scale), stdin=probe_source("watchdog"))
            a.watchdog_seen(True)
            self.journal.say(
                f"watch  i:{a.instance_id} watchdog armed: stops itself after "
                f"{window / 60:.0f} min without a heartbeat"
            )
        except SSHFailure as exc:
            self.journal.say(f"watch  i:{a.instance_id} could not arm the watchdog: {exc}")

    async def check_xid(self, a: Attempt, doc: dict[str, object]) -> None:
        """A fatal XID (the GPU fell off the bus, double-bit ECC) in the sampler's events: the
        GPU is broken under load, so the instance is stopped and its machine quarantined."""
        if not self.policy.checks.xid:
            return
        found = xid_check(doc)
        if found.ok is not False:
            return
        self.journal.fact(
            K.XID,
            a,
            actor="rule:xid",
            ok=False,
            reason=found.reason,
            detail={"class": found.failure_class, "xid": found.measured},
        )
        self.journal.say(f"xid    i:{a.instance_id} m:{a.machine_id}: {found.reason}")
        a.found_broken("rule:xid", found.reason, found.failure_class or "xid")

    def take_samples(self, a: Attempt, doc: dict[str, object]) -> None:
        """The sampler's readings, each field a finite number in its column's range or none
        (a host's document may hold any JSON), then the idle and throttle evidence."""
        now = self.clock.now()
        rows = []
        raw = doc.get("samples")
        for smp in raw[:MAX_SAMPLES] if isinstance(raw, list) else []:
            if not isinstance(smp, dict):
                continue
            row: dict[str, Any] = {k: sample_value(k, smp.get(k)) for k in SAMPLE_FIELDS}
            reasons = smp.get("reasons")
            row.update(
                instance_id=a.instance_id,
                ts=now,
                reasons=[
                    shown_text(r, 40)
                    for r in (reasons if isinstance(reasons, list) else [])[:10]
                    if isinstance(r, str)
                ],
            )
            rows.append(row)
        if not rows:
            return
        self.journal.samples(rows)
        a.sampled(rows)
        util = rows[0]["util"]
        if isinstance(util, int | float):
            a.util_seen(low_util_since(a.util_low_since, float(util), self.policy, now))
        t = detect_throttle(a.samples[-10:], self.policy.throttle_ratio)
        if t.throttled and not (a.throttle and a.throttle.throttled):
            self.journal.fact(
                K.THROTTLE,
                a,
                at=now,
                actor="engine",
                reason=t.reason,
                detail={"slowdown": t.slowdown, "reasons": list(t.reasons)},
            )
            self.journal.say(f"throttle i:{a.instance_id} m:{a.machine_id}: {t.reason}")
        a.throttle_seen(t)
