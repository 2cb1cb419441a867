"""Jobs on proven hosts (hold and batch): dispatch, look in, time out, requeue, pull artifacts and
checkpoints, push a checkpoint to a retry, and re-attach what a restart finds."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...core.campaign import Job
from ...core.jobs import JobQueue, JobState, Slot, dispatches
from ...core.lifecycle import Phase
from ...core.worth.swap import MOVE_RULE
from ...ledger import EventKind, Ledger
from ...market.protocol import Clock, Market
from ..attempt import Attempt
from ..blame_book import BlameBook
from ..fleet import Fleet
from ..hosts.link import HostLink
from ..hosts.ssh import SSHFailure
from ..journal import Journal
from ..updates import Set
from .delivered import host_speed, note_delivery, work_detail, work_lost
from .pull import PULL_TRIES, Pulls
from .rescue import Rescues
from .runner import JobStatus, launch_command, parse_status, status_command, stop_command
from .swap_watch import SwapWatch
from .upload import Uploads

K = EventKind
GONE = ("vanished", "none")  # states that say the job's process is not there


def _int(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default


class JobWork:
    def __init__(
        self,
        queue: JobQueue,
        fleet: Fleet,
        link: HostLink,
        journal: Journal,
        clock: Clock,
        artifacts_root: Path = Path("artifacts"),
        uploads: tuple[str, ...] = (),
        blame_book: BlameBook | None = None,
        by_work: bool = False,
        market: Market | None = None,
    ) -> None:
        self.queue = queue
        self.uploads = Uploads(uploads, link, journal)  # the campaign's `upload`
        self.fleet = fleet
        self.link = link
        self.journal = journal
        self.clock = clock
        self._ckpt_at: dict[str, float] = {}  # job name -> its last checkpoint pull, tried
        self._pulled_at: dict[str, float] = {}  # job name -> its last checkpoint pulled whole
        self.blame_book = blame_book  # whose fault a failed job is
        self.by_work = by_work  # buying delivered work: biggest jobs to the fastest hosts
        # proven hosts slow for their price, running jobs worth moving (core/worth/swap)
        self.swaps = SwapWatch(fleet, queue, self.last_checkpoint)
        self.pulls = Pulls(link, journal, artifacts_root)  # output off the box
        # how often a job's checkpoint is pulled on its host (the tier's: oftener on a bid)
        self.ckpt_every: Callable[[Attempt, JobState], float] | None = None
        # a moved job's newer state, copied off the rental an outbid paused (jobs/rescue.py)
        self.rescues = Rescues(market, fleet, link, journal, self.last_checkpoint)
        # jobs whose launch is under way (uploads, a push): a look meanwhile finds no process
        self._starting: set[str] = set()

    def left(self) -> list[Job]:
        """The jobs whose work is still to do: pending, or running (work not yet delivered)."""
        return [j.job for j in self.queue.jobs if j.status in ("pending", "running")]

    def restore(self, ledger: Ledger) -> None:
        """After a restart, the campaign's jobs as its ledger left them: finished jobs stay
        finished, started ones are re-attached, and one that exited with its artifacts still on
        its host is finishing again. A row in a shape no rentwatch writes reads as missing."""
        campaign = self.journal.campaign
        # job -> (when, host) of an exit not yet followed
        exited: dict[str, tuple[float, int]] = {}
        for ev in ledger.campaign_events(campaign, K.JOB_STARTED, K.JOB_FINISHED):
            job = self.queue.by_name(str(ev.detail.get("job")))
            if job is None:
                continue
            exited.pop(job.name, None)
            if ev.kind == K.JOB_STARTED:
                job.status, job.instance_id, job.started_at = "running", ev.instance_id, ev.at
                job.attempts = _int(ev.detail.get("attempt"), job.attempts + 1)
                if ev.instance_id is not None:  # its state is on that disk, newer than a pull
                    self.rescues.last_host[job.name] = ev.instance_id
                    # a host takes a next job only once the last one's end settled
                    exited = {n: e for n, e in exited.items() if e[1] != ev.instance_id}
            elif ev.detail.get("requeued") or ev.detail.get("campaign_end"):
                # a job an earlier run's end interrupted is work this run takes up again, as
                # free as an outbid's loss
                job.status, job.instance_id = "pending", None
                job.host_losses += bool(ev.detail.get("host_loss") or ev.detail.get("campaign_end"))
            else:
                self.queue.finished(job, _int(ev.detail.get("exit_code"), -1), ev.at)
                if "exit_code" in ev.detail and ev.instance_id is not None:  # its own end, no loss
                    exited[job.name] = (ev.at, ev.instance_id)
        failed: dict[str, int] = {}  # job -> pulls of its artifacts that failed since its exit
        for ev in ledger.campaign_events(campaign, K.ARTIFACTS):
            name, files = str(ev.detail.get("job")), ev.detail.get("files")
            kind = ev.detail.get("kind")
            if ev.ok and isinstance(files, list):  # what is on the controller's disk already
                dest = str(ev.detail.get("dest", ""))
                kind = kind or ("checkpoint" if dest.endswith("/checkpoint") else "artifacts")
                self.pulls.room.pulled(name, str(kind), files)
                if kind == "checkpoint":
                    self._pulled_at[name] = ev.at
                elif name in exited and ev.at >= exited[name][0]:
                    del exited[name]  # its output came off after its exit
            elif not ev.ok and name in exited and ev.at >= exited[name][0] and kind != "checkpoint":
                # after its exit a job's pulls are of its output (older rows do not say their
                # kind)
                failed[name] = failed.get(name, 0) + 1
        for name, (_, host) in exited.items():
            job = self.queue.by_name(name)
            if job is not None and job.job.artifacts and failed.get(name, 0) < PULL_TRIES:
                job.status, job.instance_id = "finishing", host
                job.pull_tries = failed.get(name, 0)

    def reap(self, now: float) -> None:
        """Requeue the jobs whose host left service, but an exited job's output on a paused bid
        rental's disk: that waits for the resume (or the tier's move, a stop of ours)."""
        for job in list(self.queue.jobs):
            if job.status not in ("running", "finishing") or job.instance_id is None:
                continue
            a = self.fleet.get(job.instance_id)
            if a is not None and (
                a.life.phase == Phase.VERIFIED or (job.status == "finishing" and a.paused)
            ):
                continue
            # our own stop to move the job to a cheaper host is no fault of the host's
            moved = a is not None and a.stop_rule == MOVE_RULE
            self.requeue(
                job,
                now,
                "moved to a cheaper proven host"
                if moved
                else "its host left service"
                if a
                else "its host is not held any more",
                host_fault=not moved,
                # the market's own stop (a contract's end), or our move, is no fault of the
                # job's: no retry
                outbid=a is not None and (a.market_stopped or moved),
            )

    def last_checkpoint(self, job: JobState) -> float | None:
        """When the job's checkpoint was last pulled off a host (None: never; a pull that
        failed is none: the work since the last one that came off is what an outbid loses)."""
        return self._pulled_at.get(job.name)

    def requeue(
        self,
        job: JobState,
        now: float,
        why: str,
        host_fault: bool = False,
        outbid: bool = False,
        lost_counted: bool = False,
    ) -> None:
        iid = job.instance_id
        self.rescues.forget(job)
        lost = None if lost_counted else work_lost(job)
        losses = job.host_losses
        if iid is not None:
            self.queue.host_died(iid, now, host_fault=host_fault, outbid=outbid)
        again = job.status == "pending"
        free = job.host_losses > losses
        self._ended(
            job,
            self.fleet.get(iid) if iid is not None else None,
            iid,
            now,
            f"interrupted: {why}"
            + (" - queued again" if again else " - out of retries")
            + (" (an early host loss: no retry used)" if free else ""),
            f"interrupted on i:{iid} ({why}); " + ("queued again" if again else "failed"),
            {
                "requeued": again,
                "host_loss": free,
                # the host's fault (it died, dropped, never started the job), not a bid lost:
                # the job lost counts against the machine's record (ledger/records.py)
                "host_fault": host_fault and not outbid,
                # the work this attempt had done, lost with its host (reference GPU-hours)
                **({"work_lost_ref_h": round(lost, 6)} if lost else {}),
            },
        )

    def _ended(
        self,
        job: JobState,
        a: Attempt | None,
        iid: int | None,
        now: float,
        reason: str,
        said: str,
        detail: dict[str, Any],
        ok: bool = False,
    ) -> None:
        """A job's end on host `iid` (`said` in the log), written with its machine's columns (the
        hosts view counts the work lost there)."""
        self.journal.fact(
            K.JOB_FINISHED,
            a,
            at=now,
            ok=ok,
            instance_id=iid,
            reason=f"job {job.name} {reason}",
            detail={"job": job.name, "attempt": job.attempts, **detail},
        )
        self.journal.say(f"job    {job.name} {said}")

    async def campaign_ended(self, why: str, keep_output: bool = True) -> None:
        """The campaign's end (a person's, its budget's or deadline's, the exit trap's), before
        its rentals are let go of: each job on a host ends there (`JobQueue.campaign_ended`),
        not queued again for a host the ended campaign will never rent. What a running one
        printed is kept where its host still answers, unless `keep_output` is off: the trap lets
        go of what bills before anything else."""
        now = self.clock.now()
        running = self.queue.campaign_ended(now)
        for job in running:
            self.rescues.forget(job)
            # the campaign's end, nothing its host did: what it had done is no work lost with a
            # host (the receipt's), and a later run of the campaign takes it up (`restore`)
            iid = job.instance_id
            self._ended(
                job,
                self.fleet.get(iid) if iid is not None else None,
                iid,
                now,
                f"interrupted: {why} - it ends with the campaign",
                f"interrupted on i:{iid} ({why}); ended with the campaign",
                {"requeued": False, "campaign_end": True, "host_fault": False},
            )
        for job in running if keep_output else []:
            a = self.fleet.get(job.instance_id) if job.instance_id is not None else None
            if a is None or a.life.phase != Phase.VERIFIED or a.ssh_host is None:
                continue  # its host is past answering: `logs` says its output was not kept
            await self.pulls.keep_log(a, job)

    async def dispatch(self, now: float) -> None:
        """Start the next pending job on each host the dispatch rule names (core/jobs)."""
        await self.rescues.sweep()
        fault = self.blame_book is not None and self.blame_book.fault is not None
        hosts = {a.instance_id: a for a in self.fleet.in_service()}
        slots = [
            Slot(
                a.instance_id,
                host_speed(a),
                # finishing too: its artifacts are still coming off that folder, and a next
                # job there would write over them (two jobs' out/result.json, one file)
                busy=self.queue.holds(a.instance_id),
                swap_due=self.swaps.due(a.instance_id, now),
                routed=a.ssh_host is not None and a.ssh_port is not None,
            )
            for a in hosts.values()
        ]
        for d in dispatches(slots, self.queue.pending, self.by_work, fault):
            if self.queue.pending == 0:
                return  # a start that failed may have queued one again; none has
            a = hosts[d.instance_id]
            now = self.clock.now()  # launches go one after another: each dated to its own
            job = self.queue.take(a.instance_id, now, biggest=self.by_work)
            if job is None:
                continue
            self._starting.add(job.name)
            try:
                await self._start(a, job, now)
            finally:
                self._starting.discard(job.name)

    async def _start(self, a: Attempt, job: JobState, now: float) -> None:
        """Its uploads, its last state, then the launch (or a wait for its state's copy)."""
        failed = await self.uploads.push(a, job, now)
        if not job.held_by(a.instance_id):
            return  # its host left service meanwhile, and `reap` queued it again
        if failed is not None:  # queued again; the host's fault unless a local file failed
            self.requeue(job, now, failed[0], host_fault=failed[1])
            return
        if job.attempts > 1 and job.job.checkpoint:  # a retry: from its last state
            await self.rescues.push_pulled(a, job, self.pulls.checkpoint_dir(job), now)
        if (
            job.held_by(a.instance_id)
            and not await self.rescues.begin(a, job, now)
            and job.held_by(a.instance_id)
        ):
            await self._launch(a, job, now)

    async def _launch(self, a: Attempt, job: JobState, now: float) -> None:
        """Start the job on its host, detached, and record it."""
        if job.job.secret_env:
            self.journal.fact(
                K.NOTE,
                a,
                at=now,
                actor="human",
                reason=f"operator opted in: job {job.name} sends "
                f"{', '.join(job.job.secret_env)} to a stranger's host",
                detail={"job": job.name, "secret_env": list(job.job.secret_env)},
            )
        seen: float | None = now
        launched = self.clock.now()
        try:
            await self.link.run(a, launch_command(job.job, first=job.attempts <= 1))
        except SSHFailure as exc:
            # the session may have died after the host started the job: look before requeueing
            try:
                started = (await self.look(a, job)).state != "none"
            except SSHFailure:
                # no answer either way: held as started; `check` looks again (twice) before
                # calling it gone, so a dropped session never costs the job a retry. Not seen
                # running, though: an outbid now finds no state of it worth copying off
                started, seen = True, None
            if not started and job.held_by(a.instance_id):
                self.requeue(job, now, f"could not start it: {exc}", host_fault=True)
        if not job.held_by(a.instance_id):
            return  # not started, or its host left service while it started (`reap`)
        # after a rescue's wait, the job computes from here: from the launch session's middle,
        # which is when the host started it as nearly as one look can say (on a loaded machine
        # a session takes minutes of a fast simulated clock, and a delivered speed measured from
        # its start or end is that much off)
        job.started_at = (launched + self.clock.now()) / 2
        job.seen_running_at = seen if seen is None else job.started_at
        self.rescues.last_host[job.name] = a.instance_id
        self.journal.fact(
            K.JOB_STARTED,
            a,
            at=now,
            reason=f"job {job.name} on a proven rental",
            detail={
                "job": job.name,
                "attempt": job.attempts,
                "run": job.job.run[:300],
                "artifacts": list(job.job.artifacts),  # none: nothing of its to pull off
            },
        )
        self.journal.say(f"job    {job.name} started on i:{a.instance_id} (attempt {job.attempts})")

    async def check(self, a: Attempt, job: JobState) -> None:
        """Look at a running job: its log line, its timeout, its checkpoint, its end."""
        if job.name in self._starting:
            return
        if job.status == "finishing":  # exited; a pull of its artifacts failed last time
            await self._settle(a, job)
            return
        if self.rescues.waiting(job):  # not started yet: its state is coming over
            if await self.rescues.step(a, job, self.clock.now()) and job.held_by(a.instance_id):
                await self._launch(a, job, self.clock.now())
            return
        asked = self.clock.now()
        st = await self.look(a, job)
        if st.state in GONE:
            # a process found gone costs the job a retry: one look is not enough to say so
            st = await self.look(a, job)
        if not job.held_by(a.instance_id):
            return  # requeued while the host answered (it left service): not this host's now
        now = self.clock.now()
        looked = (asked + now) / 2  # when the host answered, as nearly as the session says
        tail = [ln for ln in st.log_tail.splitlines() if ln.strip()]
        self.journal.writer.emit(
            Set(a, {"job_line": f"{job.name}: {tail[-1] if tail else st.state}"})
        )
        note_delivery(a, job, st.progress, now)
        if st.state == "running":
            job.seen_running_at = looked
            if job.started_at is not None and now - job.started_at > job.job.timeout_s:
                await self.link.run(a, stop_command(job.job))
                if not job.held_by(a.instance_id):
                    return  # its host left service during the stop: queued again (`reap`)
                # what it wrote by then (logs, a partial result) still comes off the box
                job.status, job.exit_code = "finishing", 124
                self._ended(
                    job,
                    a,
                    a.instance_id,
                    now,
                    f"stopped after its {job.job.timeout_s / 60:.0f} min timeout",
                    f"timed out on i:{a.instance_id}",
                    {"exit_code": 124, "timeout": True},
                )
                await self._settle(a, job)
                return
            last = self._ckpt_at.get(job.name, now if job.started_at is None else job.started_at)
            every = (
                job.job.checkpoint_every_s if self.ckpt_every is None else self.ckpt_every(a, job)
            )
            if job.job.checkpoint and now - last >= every:
                self._ckpt_at[job.name] = now
                if await self.pulls.pull(a, job, checkpoint=True):
                    self._pulled_at[job.name] = now
            return
        if st.state == "none" and job.seen_running_at is None:
            # its launch got no answer (held as started, `_launch`) and the host has no trace
            # of it: it never started there, so it costs no retry (its host's fault, not its)
            job.started_at = None
            self.requeue(job, now, "it never started there (its launch got no answer)", True)
            return
        if st.state != "exited" or st.exit_code is None:
            self.requeue(job, now, f"the job's process is gone ({st.state})")
            return
        job.status = "finishing"  # the campaign is not done until its artifacts are off the box
        # it ended between the look that last saw it running and this one: the middle of that
        # span, not this look's end, so a slow poll does not read as a slow host
        began = job.started_at if job.started_at is not None else now
        ended = (max(job.seen_running_at or began, began) + looked) / 2
        duration = max(0.0, ended - began)
        minutes = f"after {duration / 60:.1f} min"
        self._ended(
            job,
            a,
            a.instance_id,
            now,
            f"exited {st.exit_code} {minutes}",
            f"exited {st.exit_code} on i:{a.instance_id} {minutes}",
            {
                "exit_code": st.exit_code,
                "duration_s": duration,
                # how sure that is: the span between the looks the end fell between
                "ended_within_s": round(looked - max(job.seen_running_at or began, began), 1),
                "log_tail": st.log_tail[-500:],
                **work_detail(a, job, duration, st.exit_code == 0),
            },
            ok=st.exit_code == 0,
        )
        if self.blame_book is not None:
            if st.exit_code == 0:
                self.blame_book.job_finished(job.job.run)
            else:  # the same last line and exit on two machines: the job's fault, not theirs
                self.blame_book.job_failed(a, job.job.run, st.exit_code, st.log_tail)
        job.exit_code = st.exit_code
        await self._settle(a, job)

    async def _settle(self, a: Attempt, job: JobState) -> None:
        """An exited job's end: its artifacts off the box, then done or failed by its exit. A failed
        pull is retried, up to PULL_TRIES; a host that leaves service first takes the job back to
        the queue (`reap`)."""
        if await self.pulls.keep_log(a, job) and not job.held_by(a.instance_id, "finishing"):
            return  # its host left service meanwhile: `reap` queued it again
        if job.job.artifacts and not await self.pulls.pull(a, job):
            job.pull_tries += 1
            if job.pull_tries < PULL_TRIES:
                return
        if not job.job.artifacts:  # what it left running stops with it (the pull does that)
            with contextlib.suppress(SSHFailure):
                await self.link.run(a, stop_command(job.job))
        if not job.held_by(a.instance_id, "finishing"):
            return  # requeued while it pulled (found in CI: "done" then, on its next host)
        code = job.exit_code if job.exit_code is not None else -1
        self.queue.finished(job, code, self.clock.now())

    async def look(self, a: Attempt, job: JobState) -> JobStatus:
        """The job's state on its host; a session cut before an answer raises SSHFailure, not
        "gone"."""
        res = await self.link.run(a, status_command(job.job))
        if res.exit_status is None or not res.stdout.strip():
            raise SSHFailure(
                "session dropped before the host answered"
                if res.exit_status is None
                else f"the status check printed nothing (exit {res.exit_status})"
            )
        return parse_status(res.stdout)
