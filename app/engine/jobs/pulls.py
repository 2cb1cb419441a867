"""Pulling a job's output off its host: its artifacts when it ends (only the files it wrote), its
checkpoint as it runs, each pull recorded with sizes and checksums, within the campaign's room."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.artifact_room import ArtifactRoom
from ...core.jobs import JobState
from ...ledger import EventKind
from ..attempt import Attempt
from ..hosts.link import HostLink
from ..journal import Journal
from .runner import (
    SFTP_ERRORS,
    fetch_artifacts,
    parse_stale,
    stale_command,
    stop_command,
    summary,
)

PULL_TRIES = 3  # looks that try to pull an exited job's artifacts before it settles without


@dataclass(eq=False)
class Pulls:
    link: HostLink
    journal: Journal
    artifacts_root: Path
    # what the campaign may still pull off its hosts
    room: ArtifactRoom = field(default_factory=ArtifactRoom, init=False)

    def checkpoint_dir(self, job: JobState) -> Path:
        return self.artifacts_root / self.journal.campaign / job.name / "checkpoint"

    async def pull(self, a: Attempt, job: JobState, checkpoint: bool = False) -> bool:
        """Pull the job's artifacts (or its checkpoint) off its host; False: not pulled."""
        dest = self.artifacts_root / self.journal.campaign / job.name
        spec = job.job
        if checkpoint:
            assert spec.checkpoint is not None
            dest = self.checkpoint_dir(job)
            spec = dataclasses.replace(spec, artifacts=(spec.checkpoint,))
        kind = "checkpoint" if checkpoint else "artifacts"
        room, files = self.room.left_for(job.name, kind)
        stale: frozenset[str] = frozenset()
        try:
            if not checkpoint:
                # its end: what it left running is stopped (a background child went on writing
                # into the next job's folder, or holds GPU memory the next job needs), and a
                # shared workdir's earlier files are not this job's output
                ended = f"{stop_command(spec)}; {stale_command(spec)}"
                stale = parse_stale((await self.link.run(a, ended)).stdout)
            records = await self.link.on_connection(
                a, lambda conn: fetch_artifacts(conn, spec, dest, room, files, stale)
            )
        except SFTP_ERRORS as exc:
            self._record(a, job, False, f"artifacts of {job.name} not pulled: {exc}", kind=kind)
            self.journal.say(f"artifacts of {job.name} FAILED: {exc}")
            return False
        self.room.pulled(job.name, kind, records)
        self._record(
            a,
            job,
            True,
            f"artifacts of {job.name}: {summary(records)}",
            files=records,
            dest=str(dest),
            kind=kind,
        )
        self.journal.say(f"pull   {job.name}: {summary(records)} -> {dest}")
        return True

    def _record(self, a: Attempt, job: JobState, ok: bool, reason: str, **detail: Any) -> None:
        self.journal.fact(
            EventKind.ARTIFACTS,
            a,
            ok=ok,
            reason=reason,
            detail={"job": job.name, **detail},
        )
