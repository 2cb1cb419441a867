"""What a retried job starts from: the checkpoint last pulled off its host, pushed back (or, on the
same rental again, the state on its disk), and a moved job's newer work, copied off the rental an
outbid paused.

Vast copies between instances even from a stopped one (vast-ai/docs `data-movement.mdx`, `PUT
/api/v0/commands/copy_direct/`), but says only that a copy began, so the copied folder is looked
at over SSH each job check until it is the same at two looks `RESCUE_SETTLE_S` apart. A copy runs
over SSH between the hosts, so none is asked off a host without open ports or seen offline. Past
`RESCUE_WAIT_S`, or on any refusal, the job starts from the pulled checkpoint."""

from __future__ import annotations

import contextlib
import posixpath
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...core.bidding.tier import RESCUE_SETTLE_S, RESCUE_WAIT_S, rescue_worth
from ...core.campaign import Job
from ...core.jobs import JobState
from ...core.lifecycle import Phase
from ...ledger import EventKind
from ...market.errors import REFUSALS, AnswerLost, ApiError
from ...market.protocol import Market
from ..attempt import Attempt
from ..fleet import Fleet
from ..hosts.link import HostLink
from ..hosts.ssh import SSHFailure
from ..journal import Journal
from .pull import SFTP_ERRORS
from .runner import checkpoint_path, checkpoint_word, job_dir, push_checkpoint

K = EventKind


@dataclass
class Paused:
    """Where a requeued job's newer state waits: the rental an outbid paused."""

    instance_id: int
    lost_s: float | None  # the work since the last pull, when the outbid came


@dataclass
class Copying:
    paused: Paused  # the copy's source, and the work since the last pull a landed copy keeps
    asked_at: float
    listing: bytes | None = None  # what the copied folder held at the last look
    seen_at: float = 0.0  # since when it has held that


def checkpoint_abs(job: Job, home: str) -> str:
    """The job's checkpoint as an absolute container path, under `home` unless absolute."""
    path = checkpoint_path(job)
    return path if path.startswith("/") else posixpath.normpath(posixpath.join(home, path))


def unanswered(exc: Exception) -> bool:
    """A copy's ask that may have been acted on: its answer lost, or a 5xx (the market's
    front may fail after its back started the transfer). Asking again would start another."""
    return isinstance(exc, AnswerLost) or (isinstance(exc, ApiError) and exc.status >= 500)


def cannot_copy_off(source: Attempt) -> str | None:
    """Why no copy can come off `source` now, in the ledger's words (None: one may)."""
    if source.offer is not None and source.offer.direct_port_count == 0:
        return "its host has no open port (Vast copies between instances over SSH)"
    if source.status == "offline":
        return "its host is offline"
    return None


def refusal(exc: Exception) -> str:
    """A refused copy's reason, the market's words kept."""
    said = str(exc)[:200]
    if "open port" in said:
        return f"its host has no open port for the copy's SSH: {said}"
    return said


def landing(job: Job) -> str:
    return f"{job_dir(job.name)}/rescue"


@dataclass(eq=False)
class Rescues:
    market: Market | None
    fleet: Fleet
    link: HostLink
    journal: Journal
    # when the job's checkpoint last came off a host (JobWork's), for what a retry starts from
    pulled_at: Callable[[JobState], float | None] = lambda _: None
    # hosts left while a copy into them ran: to cancel
    orphans: set[int] = field(default_factory=set, init=False)
    paused: dict[str, Paused] = field(default_factory=dict, init=False)  # job -> its state's rental
    copying: dict[str, Copying] = field(default_factory=dict, init=False)  # job -> a copy it awaits
    last_host: dict[str, int] = field(default_factory=dict, init=False)  # job -> where it last ran

    async def push_pulled(self, a: Attempt, job: JobState, src: Path, now: float) -> None:
        """A retried job starts from the last checkpoint this ledger records pulled, pushed back
        under its folder; on the same rental again from the newer state on its disk."""
        if not src.exists():
            return
        if self.last_host.get(job.name) == a.instance_id:
            self.journal.say(f"resume {job.name} on i:{a.instance_id} from the state on its disk")
            return
        if self.pulled_at(job) is None:
            # the folder is the campaign name's, whichever ledger ran it: what no pull of this
            # ledger put there is another run's state, not this job's
            self.journal.say(f"resume {job.name}: no checkpoint of it was pulled; it starts over")
            return
        try:
            pushed = await self.link.on_connection(
                a, lambda conn: push_checkpoint(conn, job.job, src)
            )
        except SFTP_ERRORS as exc:
            self.journal.say(f"resume {job.name}: checkpoint not pushed ({exc}); it starts over")
            return
        self.journal.fact(
            K.ARTIFACTS,
            a,
            at=now,
            ok=True,
            reason=f"checkpoint of {job.name} pushed to its retry ({len(pushed)} file(s))",
            detail={"job": job.name, "checkpoint_pushed": pushed},
        )
        self.journal.say(f"resume {job.name} on i:{a.instance_id} from its last checkpoint")

    def outbid(self, job: JobState, instance_id: int, lost_s: float | None) -> None:
        self.paused[job.name] = Paused(instance_id, lost_s)

    def forget(self, job: JobState) -> None:
        """The job left its host (requeued, failed): no copy is waited for there any more; its
        state still waits on the paused rental, for the next host to ask for."""
        c = self.copying.pop(job.name, None)
        if c is not None:
            self.paused[job.name] = c.paused
            if job.instance_id is not None:  # the copy into the host it left runs on: cancel it
                self.orphans.add(job.instance_id)

    async def sweep(self) -> None:
        """Cancel the copies into hosts their job left while it waited for them (`forget`)."""
        while self.orphans and self.market is not None:
            dst = self.orphans.pop()
            try:
                await self.market.cancel_copies_to(dst)
            except REFUSALS as exc:  # a destroyed host's copies end with it
                self.journal.say(f"rescue: copies into i:{dst} not cancelled: {exc}")

    def _hand_back(self, job: JobState, paused: Paused) -> None:
        """The job left the host its state was coming to: where that state waits, for the
        next host to ask for, unless a next host has the job already (it started without)."""
        if job.status == "pending":
            self.paused[job.name] = paused

    def waiting(self, job: JobState) -> bool:
        return job.name in self.copying

    async def begin(self, a: Attempt, job: JobState, now: float) -> bool:
        """Ask for the job's state off its paused rental, onto `a`. True: asked, and the job
        waits for it (`step`); False: start it now from what was pulled."""
        paused = self.paused.pop(job.name, None)
        if paused is None or self.market is None or not job.job.checkpoint:
            return False
        source = self.fleet.get(paused.instance_id)
        kept = (
            source is not None
            and paused.instance_id != a.instance_id
            and source.life.phase == Phase.STOPPED
        )
        if source is None or not rescue_worth(paused.lost_s, True, kept):
            return False
        why_not = cannot_copy_off(source)
        if why_not is not None:
            self.journal.fact(
                K.RESCUED,
                a,
                at=now,
                ok=False,
                reason=f"no copy of job {job.name}'s state off i:{paused.instance_id}: "
                f"{why_not}; it starts from {self.start_point(job)}",
                detail={"job": job.name, "source": paused.instance_id, "stage": "skipped"},
            )
            self.journal.say(f"rescue {job.name}: no copy off i:{paused.instance_id}: {why_not}")
            return False
        try:
            res = await self.link.run(a, f'rm -rf {landing(job.job)} && printf "%s" "$HOME"')
        except SSHFailure:
            return False
        if not job.held_by(a.instance_id):  # queued again meanwhile (its host gone)
            self._hand_back(job, paused)
            return False
        home = res.stdout.decode(errors="replace").strip()
        if res.exit_status != 0 or not home.startswith("/"):
            return False
        # the checkpoint itself (no trailing slash: it may be a file, which rsync refuses as
        # `file/`), into the landing folder: it lands there under its own name
        src = checkpoint_abs(job.job, home)
        dst = posixpath.join(home, landing(job.job).removeprefix("~/")) + "/"
        lost_min = (paused.lost_s or 0) / 60
        detail = {"job": job.name, "source": paused.instance_id, "src_path": src, "dst_path": dst}
        lost_answer = None
        try:
            await self.market.copy_between(paused.instance_id, src, a.instance_id, dst)
        except REFUSALS as exc:
            if not unanswered(exc):
                self.journal.fact(
                    K.RESCUED,
                    a,
                    at=now,
                    ok=False,
                    reason=f"copy of job {job.name}'s state off i:{paused.instance_id} refused "
                    f"({refusal(exc)}): it starts from {self.start_point(job)}",
                    detail={**detail, "stage": "refused"},
                )
                return False
            lost_answer = str(exc)  # the market may have acted: the copy may be landing
        # the copy runs into a host the job left: cancelled (`sweep`)
        if not job.held_by(a.instance_id):
            self._hand_back(job, paused)
            self.orphans.add(a.instance_id)
            return False
        self.copying[job.name] = Copying(paused, now)
        self.journal.fact(
            K.RESCUED,
            a,
            at=now,
            ok=True,
            reason=f"copy asked of job {job.name}'s state off paused i:{paused.instance_id} "
            f"({lost_min:.1f} min of work since its last pulled checkpoint)"
            + (
                ""
                if lost_answer is None
                else f"; no answer came ({lost_answer}): looked for all the same, not asked again"
            ),
            detail={
                **detail,
                "stage": "asked",
                "work_since_pull_s": paused.lost_s,
                **({} if lost_answer is None else {"answer_lost": True}),
            },
        )
        self.journal.say(f"rescue {job.name}: copy asked off i:{paused.instance_id}")
        return True

    def start_point(self, job: JobState) -> str:
        """What a job starts from without the copy, in the ledger's words."""
        pulled = self.pulled_at(job) is not None
        return "its last pulled checkpoint" if pulled else "the start (no checkpoint came off)"

    async def _cancel(self, a: Attempt, folder: str) -> str:
        """A copy given up on is cancelled (it bills bandwidth on both machines while it runs)
        and what of it landed is removed; what the ledger says of that."""
        said = "asked"
        if self.market is not None:
            try:
                await self.market.cancel_copies_to(a.instance_id)
            except REFUSALS as exc:  # an answer lost among them: the copy may run on
                said = f"not taken: {exc}"[:200]
        with contextlib.suppress(SSHFailure):
            await self.link.run(a, f"rm -rf {folder}")
        return said

    async def step(self, a: Attempt, job: JobState, now: float) -> bool:
        """One look at a copy under way. True: done with it (landed or given up); False: waiting."""
        c = self.copying[job.name]
        folder = landing(job.job)
        try:
            res = await self.link.run(a, f"ls -lnAR {folder} 2>/dev/null; true")
            listing = res.stdout if res.exit_status == 0 else None
        except SSHFailure:
            listing = None
        if self.copying.get(job.name) is not c:
            return False  # the job left this host meanwhile (`forget`): nothing to start here
        settled = (
            listing is not None
            and listing.strip() != b""
            and listing == c.listing
            and now - c.seen_at >= RESCUE_SETTLE_S
        )
        source = self.fleet.get(c.paused.instance_id)
        dark = source is not None and source.status == "offline" and not settled
        if not settled and not dark and now - c.asked_at < RESCUE_WAIT_S:
            if listing is not None and listing != c.listing:
                c.listing, c.seen_at = listing, now
            return False
        del self.copying[job.name]
        landed = False
        if settled:
            # the copied state replaces what was pushed (it is the job's whole state at the
            # outbid, the pushed files included): a file for a file, a folder for a folder
            ckpt = checkpoint_word(job.job)
            got = f"{folder}/{shlex.quote(posixpath.basename(checkpoint_path(job.job)))}"
            with contextlib.suppress(SSHFailure):
                res = await self.link.run(
                    a,
                    f'[ -e {got} ] && rm -rf {ckpt} && mkdir -p "$(dirname {ckpt})" '
                    f"&& cp -a {got} {ckpt} && rm -rf {folder}",
                )
                landed = res.exit_status == 0
        # it left this host meanwhile: its state still waits on the rental
        if not job.held_by(a.instance_id):
            self._hand_back(job, c.paused)
            return False
        cancelled = None if settled else await self._cancel(a, folder)
        waited = (now - c.asked_at) / 60
        self.journal.fact(
            K.RESCUED,
            a,
            at=now,
            ok=landed,
            reason=f"job {job.name}'s state from i:{c.paused.instance_id} in place after {waited:.1f} min"
            if landed
            else f"job {job.name}'s state from i:{c.paused.instance_id} not in after {waited:.1f} min"
            + (": its host went offline" if dark else "")
            + f": it starts from {self.start_point(job)}",
            detail={
                "job": job.name,
                "source": c.paused.instance_id,
                "stage": "landed" if landed else "lost",
                **({"source_offline": True} if dark else {}),
                # the outbid's loss this copy took back (the receipt's work lost nets it out)
                **({"work_kept_s": c.paused.lost_s} if landed else {}),
                **({} if cancelled is None else {"cancel": cancelled}),
            },
        )
        self.journal.say(
            f"rescue {job.name}: {'in place' if landed else 'given up'} after {waited:.1f} min"
        )
        return True
