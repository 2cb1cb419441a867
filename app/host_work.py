"""Work the supervisor does on hosts over SSH: the compute preflight, the verified host's
watchdog, heartbeat and NVML samples, and the jobs (hold and batch). A mixin of `Supervisor`,
kept apart so each file reads on its own; it uses the supervisor's ledger, client and runner."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import asyncssh

from .core.jobs import JobState
from .core.lifecycle import Phase
from .core.verdict import Verdict, detect_throttle, preflight_verdict
from .job_runner import (
    UnsafePath,
    fetch_artifacts,
    launch_command,
    parse_status,
    push_checkpoint,
    status_command,
    stop_command,
    summary,
)
from .probe_io import ProbeError, parse_probe_output, probe_source
from .ssh_runner import HostKeyChanged, RunResult, SSHFailure

if TYPE_CHECKING:
    from .attempt import Attempt
    from .client import VastClient
    from .core.campaign import Campaign
    from .core.jobs import JobQueue
    from .core.policy import Policy
    from .ledger import Ledger
    from .ssh_runner import SSHRunner


T = TypeVar("T")


class HostWork:
    """Needs, from the class it is mixed into: the attributes below, `now`, `_say` and `_ctx`."""

    client: VastClient
    ledger: Ledger
    policy: Policy
    campaign: Campaign
    ssh: SSHRunner
    ssh_slots: asyncio.Semaphore
    jobs: JobQueue
    attempts: dict[int, Attempt]
    artifacts_root: Path
    watchdog_window_s: float
    beat_s: float
    job_poll_s: float
    _ckpt_at: dict[str, float]

    def now(self) -> float:
        raise NotImplementedError

    def _say(self, line: str) -> None:
        raise NotImplementedError

    def _ctx(self, a: Attempt) -> dict[str, Any]:
        raise NotImplementedError

    # -- preflight ---------------------------------------------------------------------------
    def _start_preflight(self, a: Attempt) -> None:
        if a.life.phase == Phase.RUNNING:
            a.life.move(Phase.VERIFYING, self.now(), "preflight started")
        a.preflight_task = asyncio.create_task(self._preflight(a))

    def _wall(self, market_seconds: float, floor: float) -> float:
        return max(floor, market_seconds / max(self.client.time_scale, 1e-9))

    async def _preflight(self, a: Attempt) -> None:
        script = probe_source("preflight")
        while True:
            if a.ssh_host is None or a.ssh_port is None:
                a.ssh_error = "no SSH port published yet"
                await asyncio.sleep(self._wall(10, 0.05))
                continue
            if a.ssh_error is None or a.ssh_error.startswith("no SSH port"):
                a.ssh_error = f"no answer yet from {a.ssh_host}:{a.ssh_port}"
            try:
                async with self.ssh_slots:
                    self.ssh.connect_timeout = self._wall(20, 1.0)
                    res = await self.ssh.run(
                        a.instance_id,
                        a.ssh_host,
                        a.ssh_port,
                        "python3 -",
                        stdin=script,
                        timeout=self._wall(self.policy.preflight_timeout_s, 5.0),
                    )
            except HostKeyChanged as exc:
                a.verdict = Verdict(False, "host_key_changed", str(exc))
                return
            except SSHFailure as exc:
                if "did not finish" in str(exc):
                    a.verdict = Verdict(False, "timeout", f"preflight hung: {exc}")
                    return
                a.ssh_error = str(exc)
                await asyncio.sleep(self._wall(10, 0.05))
                continue
            a.ssh_error = None
            try:
                doc = parse_probe_output(res.stdout, "preflight", res.truncated)
            except ProbeError as exc:
                a.verdict = Verdict(False, "bad_probe", str(exc))
                return
            a.verdict = preflight_verdict(
                doc, a.gpu_name, self.policy.min_speed_share, self.policy.check_gpu_name
            )
            kind = "preflight_passed" if a.verdict.ok else "preflight_failed"
            if not a.verdict.ok:
                self.ledger.record(
                    kind,
                    at=self.now(),
                    actor="rule:preflight",
                    reason=a.verdict.reason,
                    ok=False,
                    detail={
                        "class": a.verdict.failure_class,
                        "tflops": a.verdict.tflops,
                        "probe": {k: doc.get(k) for k in ("device", "matmul", "error", "total_s")},
                    },
                    **self._ctx(a),
                )
            return

    # -- jobs: hold and batch --------------------------------------------------------------------
    def _restore_jobs(self) -> None:
        """After a restart: finished jobs stay finished; started ones are re-attached."""
        for ev in self.ledger.events(
            where="kind IN ('job_started', 'job_finished') AND campaign = ?",
            params=[self.campaign.name],
        ):
            job = self.jobs.by_name(str(ev.detail.get("job")))
            if job is None:
                continue
            if ev.kind == "job_started":
                job.status, job.instance_id, job.started_at = "running", ev.instance_id, ev.at
                job.attempts = int(ev.detail.get("attempt", job.attempts + 1))
            elif ev.detail.get("requeued"):
                job.status, job.instance_id = "pending", None
            else:
                self.jobs.finished(job, int(ev.detail.get("exit_code", -1)), ev.at)

    def _reap_jobs(self, now: float) -> None:
        for job in list(self.jobs.jobs):
            if job.status != "running" or job.instance_id is None:
                continue
            a = self.attempts.get(job.instance_id)
            if a is not None and a.life.phase == Phase.VERIFIED:
                continue
            self._requeue(
                job, now, "its host left service" if a else "its host is not held any more"
            )

    def _requeue(self, job: JobState, now: float, why: str) -> None:
        iid = job.instance_id
        if iid is not None:
            self.jobs.host_died(iid)
        again = job.status == "pending"
        self.ledger.record(
            "job_finished",
            at=now,
            actor="engine",
            ok=False,
            campaign=self.campaign.name,
            instance_id=iid,
            reason=f"job {job.name} interrupted: {why}"
            + (" - queued again" if again else " - out of retries"),
            detail={"job": job.name, "requeued": again, "attempt": job.attempts},
        )
        self._say(
            f"job    {job.name} interrupted on i:{iid} ({why}); {'queued again' if again else 'failed'}"
        )

    async def _dispatch_jobs(self, now: float) -> None:
        for a in list(self.attempts.values()):
            if (
                not (a.passed_preflight and a.life.phase == Phase.VERIFIED)
                or self.jobs.pending == 0
            ):
                continue
            if self.jobs.on(a.instance_id) is not None:
                continue
            job = self.jobs.take(a.instance_id, now)
            if job is None:
                continue
            await self._resume_from_checkpoint(a, job)
            if job.job.secret_env:
                self.ledger.record(
                    "note",
                    at=now,
                    actor="human",
                    reason=(
                        f"operator opted in: job {job.name} sends {', '.join(job.job.secret_env)} to a stranger's host"
                    ),
                    detail={"job": job.name, "secret_env": list(job.job.secret_env)},
                    **self._ctx(a),
                )
            try:
                await self._ssh(a, launch_command(job.job))
            except SSHFailure as exc:
                # the session may have died after the host started the job: look before requeueing
                try:
                    started = (
                        parse_status((await self._ssh(a, status_command(job.job))).stdout).state
                        != "none"
                    )
                except SSHFailure:
                    started = False
                if not started:
                    self._requeue(job, now, f"could not start it: {exc}")
                    continue
            self.ledger.record(
                "job_started",
                at=now,
                actor="engine",
                reason=f"job {job.name} on a proven rental",
                detail={"job": job.name, "attempt": job.attempts, "run": job.job.run[:300]},
                **self._ctx(a),
            )
            self._say(f"job    {job.name} started on i:{a.instance_id} (attempt {job.attempts})")

    async def _check_job(self, a: Attempt, job: JobState) -> None:
        res = await self._ssh(a, status_command(job.job))
        st = parse_status(res.stdout)
        now = self.now()
        tail = [ln for ln in st.log_tail.splitlines() if ln.strip()]
        a.job_line = f"{job.name}: {tail[-1] if tail else st.state}"
        if st.state == "running":
            if job.started_at is not None and now - job.started_at > job.job.timeout_s:
                await self._ssh(a, stop_command(job.job))
                self.jobs.finished(job, 124, now)
                self.ledger.record(
                    "job_finished",
                    at=now,
                    actor="engine",
                    ok=False,
                    reason=f"job {job.name} stopped after its {job.job.timeout_s / 60:.0f} min timeout",
                    detail={"job": job.name, "exit_code": 124, "timeout": True},
                    **self._ctx(a),
                )
                self._say(f"job    {job.name} timed out on i:{a.instance_id}")
                return
            if job.job.checkpoint and now - self._ckpt_at.get(job.name, job.started_at or now) >= (
                job.job.checkpoint_every_s
            ):
                self._ckpt_at[job.name] = now
                await self._pull_artifacts(a, job, checkpoint=True)
            return
        if st.state != "exited" or st.exit_code is None:
            self._requeue(job, now, f"the job's process is gone ({st.state})")
            return
        if self.jobs.on(a.instance_id) is not job or job.status != "running":
            return  # already accounted for
        job.status = "finishing"  # the campaign is not done until its artifacts are off the box
        duration = now - (job.started_at or now)
        self.ledger.record(
            "job_finished",
            at=now,
            actor="engine",
            ok=st.exit_code == 0,
            reason=f"job {job.name} exited {st.exit_code} after {duration / 60:.1f} min",
            detail={
                "job": job.name,
                "exit_code": st.exit_code,
                "duration_s": duration,
                "attempt": job.attempts,
                "log_tail": st.log_tail[-500:],
            },
            **self._ctx(a),
        )
        self._say(
            f"job    {job.name} exited {st.exit_code} on i:{a.instance_id} after {duration / 60:.1f} min"
        )
        if job.job.artifacts:
            await self._pull_artifacts(a, job)
        self.jobs.finished(job, st.exit_code, now)

    def _checkpoint_dir(self, job: JobState) -> Path:
        return self.artifacts_root / self.campaign.name / job.name / "checkpoint"

    async def _resume_from_checkpoint(self, a: Attempt, job: JobState) -> None:
        """A retried job starts from the last checkpoint pulled off its previous host."""
        src = self._checkpoint_dir(job)
        if not job.job.checkpoint or not src.exists() or job.attempts <= 1:
            return
        try:
            pushed = await self._on_connection(a, lambda conn: push_checkpoint(conn, job.job, src))
        except (SSHFailure, UnsafePath, asyncssh.Error, OSError, TimeoutError) as exc:
            self._say(f"resume {job.name}: checkpoint not pushed ({exc}); it starts over")
            return
        self._record_artifacts(
            a,
            job,
            True,
            f"checkpoint of {job.name} pushed to its retry ({len(pushed)} file(s))",
            checkpoint_pushed=pushed,
        )
        self._say(f"resume {job.name} on i:{a.instance_id} from its last checkpoint")

    async def _pull_artifacts(self, a: Attempt, job: JobState, checkpoint: bool = False) -> None:
        assert a.ssh_host is not None and a.ssh_port is not None
        dest = self.artifacts_root / self.campaign.name / job.name
        spec = job.job
        if checkpoint:
            assert spec.checkpoint is not None
            dest, spec = (
                self._checkpoint_dir(job),
                dataclasses.replace(spec, artifacts=(spec.checkpoint,)),
            )
        try:
            records = await self._on_connection(a, lambda conn: fetch_artifacts(conn, spec, dest))
        except (SSHFailure, UnsafePath, asyncssh.Error, OSError, TimeoutError) as exc:
            self._record_artifacts(a, job, False, f"artifacts of {job.name} not pulled: {exc}")
            self._say(f"artifacts of {job.name} FAILED: {exc}")
            return
        self._record_artifacts(
            a,
            job,
            True,
            f"artifacts of {job.name}: {summary(records)}",
            files=records,
            dest=str(dest),
        )
        self._say(f"pull   {job.name}: {summary(records)} -> {dest}")

    def _record_artifacts(
        self, a: Attempt, job: JobState, ok: bool, reason: str, **detail: Any
    ) -> None:
        self.ledger.record(
            "artifacts",
            at=self.now(),
            actor="engine",
            ok=ok,
            reason=reason,
            detail={"job": job.name, **detail},
            **self._ctx(a),
        )

    async def _on_connection(
        self, a: Attempt, work: Callable[[asyncssh.SSHClientConnection], Awaitable[T]]
    ) -> T:
        """SFTP work on one pinned connection, within the SSH concurrency bound and a deadline."""
        assert a.ssh_host is not None and a.ssh_port is not None
        async with self.ssh_slots, self._distrust_on_key_change(a):
            conn = await self.ssh._connect(a.instance_id, a.ssh_host, a.ssh_port)
            try:
                return await asyncio.wait_for(work(conn), self._wall(600, 30))
            finally:
                conn.close()

    # -- verified instances: watchdog, heartbeat, NVML samples ---------------------------------
    async def _ssh(
        self, a: Attempt, command: str, stdin: bytes | None = None, timeout: float = 60
    ) -> RunResult:
        assert a.ssh_host is not None and a.ssh_port is not None
        async with self.ssh_slots, self._distrust_on_key_change(a):
            return await self.ssh.run(
                a.instance_id,
                a.ssh_host,
                a.ssh_port,
                command,
                stdin=stdin,
                timeout=self._wall(timeout, 5.0),
            )

    async def _tend(self, a: Attempt) -> None:
        """Arm the host's dead-man's switch, then beat its heartbeat and read its GPU."""
        try:
            await self._ssh(
                a,
                "mkdir -p ~/.rentwatch && cat > ~/.rentwatch/watchdog.py && touch ~/.rentwatch/heartbeat"
                " && { [ -f ~/.rentwatch/watchdog.pid ] && kill -0 $(cat ~/.rentwatch/watchdog.pid) 2>/dev/null"
                f" || (setsid nohup python3 ~/.rentwatch/watchdog.py --window-s {self.watchdog_window_s:g}"
                f" --scale {self.client.time_scale:g} >/dev/null 2>&1 </dev/null & echo $! > ~/.rentwatch/watchdog.pid); }}",
                stdin=probe_source("watchdog"),
            )
            a.watchdog_armed = True
            self._say(
                f"watch  i:{a.instance_id} watchdog armed: stops itself after "
                f"{self.watchdog_window_s / 60:.0f} min without a heartbeat"
            )
        except SSHFailure as exc:
            self._say(f"watch  i:{a.instance_id} could not arm the watchdog: {exc}")
        nvml = probe_source("nvml_sample")
        last_beat = -1e18
        while a.life.phase == Phase.VERIFIED and not a.untrusted:
            job = self.jobs.on(a.instance_id)
            await asyncio.sleep(self._wall(self.job_poll_s if job else self.beat_s, 0.05))
            if a.life.phase != Phase.VERIFIED or a.ssh_host is None or a.untrusted:
                break
            job = self.jobs.on(a.instance_id)
            if job is not None:
                try:
                    await self._check_job(a, job)
                except SSHFailure as exc:
                    self._say(f"job    {job.name} on i:{a.instance_id}: no answer ({exc})")
            if self.now() - last_beat < self.beat_s:
                continue
            last_beat = self.now()
            try:
                if a.watchdog_armed:
                    await self._ssh(a, "touch ~/.rentwatch/heartbeat")
                res = await self._ssh(a, "python3 -", stdin=nvml)
                doc = parse_probe_output(res.stdout, "nvml_sample", res.truncated)
            except (SSHFailure, ProbeError) as exc:
                self._say(f"sample i:{a.instance_id} failed: {exc}")
                continue
            self._take_samples(a, doc)

    @contextlib.asynccontextmanager
    async def _distrust_on_key_change(self, a: Attempt) -> AsyncIterator[None]:
        """Around every connection to a proven host: if it answers with another key than the
        one pinned for this instance, nothing more goes to it (no heartbeat, job, push or pull)
        and the rules stop it and quarantine it. The error goes on to the caller."""
        try:
            yield
        except HostKeyChanged as exc:
            if not a.untrusted:
                self._distrust(a, exc)
            raise

    def _distrust(self, a: Attempt, exc: HostKeyChanged) -> None:
        a.untrusted = str(exc)
        self.ledger.record(
            "host_key_changed",
            at=self.now(),
            actor="engine",
            reason=str(exc),
            ok=False,
            **self._ctx(a),
        )
        self._say(f"distrust i:{a.instance_id} m:{a.machine_id}: {exc}")

    def _take_samples(self, a: Attempt, doc: dict[str, Any]) -> None:
        now = self.now()
        rows = []
        for smp in doc.get("samples") or []:
            if not isinstance(smp, dict):
                continue
            row = {
                k: smp.get(k) if isinstance(smp.get(k), int | float) else None
                for k in (
                    "util",
                    "sm_clock",
                    "max_sm_clock",
                    "reasons_bits",
                    "temp",
                    "power_w",
                    "mem_used_mb",
                )
            }
            row.update(
                instance_id=a.instance_id,
                ts=now,
                reasons=[r for r in smp.get("reasons") or [] if isinstance(r, str)][:10],
            )
            rows.append(row)
        if not rows:
            return
        self.ledger.add_samples(rows)
        a.samples = (a.samples + rows)[-120:]
        util = rows[0]["util"]
        if isinstance(util, int | float):
            a.util_low_since = (
                (a.util_low_since or now) if util < self.policy.idle_util_pct else None
            )
        t = detect_throttle(a.samples[-10:], self.policy.throttle_ratio)
        if t.throttled and not (a.throttle and a.throttle.throttled):
            self.ledger.record(
                "throttle",
                at=now,
                actor="engine",
                reason=t.reason,
                detail={"slowdown": t.slowdown, "reasons": list(t.reasons)},
                **self._ctx(a),
            )
            self._say(f"throttle i:{a.instance_id} m:{a.machine_id}: {t.reason}")
        a.throttle = t
