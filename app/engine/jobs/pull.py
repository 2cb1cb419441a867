"""A job's output off its host: its artifacts when it ends (only the files it wrote), its checkpoint
as it runs, its log kept, each pull recorded with sizes and checksums within the campaign's room.
Each file is streamed: the byte cap and the sha256 on what arrives, written 0600 to a part file
renamed into place only when whole, the folders walked bounded. What the host says about a
file's size decides nothing: a host reported 10 bytes to `lstat` and then served 2.4 GB."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import posixpath
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import asyncssh

from ...core.artifact_room import PULL_MAX_BYTES, PULL_MAX_FILES, ArtifactRoom
from ...core.campaign import Job, home_path
from ...core.errors import RentwatchError
from ...core.jobs import JobState
from ...core.text import clean
from ...ledger import EventKind
from ..attempt import Attempt
from ..hosts.link import HostLink
from ..hosts.ssh import SSHFailure
from ..journal import Journal
from .output import LOG_KEEP, log_command, log_path
from .runner import (
    JOB_ROOT,
    UnsafePath,
    parse_stale,
    safe_relative,
    stale_command,
    stop_command,
)

CHUNK = 256 * 1024  # bytes per SFTP read or write: memory held per file, whatever its size


class OverCap(Exception):
    """The file went past the bytes the pull had left: nothing of it is kept."""


def private_dirs(root: Path, leaf: Path) -> None:
    """`leaf` and every folder from `root` to it made and kept 0700: artifacts are private."""
    leaf.mkdir(parents=True, exist_ok=True, mode=0o700)
    here = leaf
    while True:
        with contextlib.suppress(OSError):
            if os.stat(here).st_mode & 0o077:
                os.chmod(here, 0o700)
        if here == root or root not in here.parents:
            break
        here = here.parent


@contextlib.contextmanager
def private_file(local: Path) -> Iterator[BinaryIO]:
    """`local` written 0600 through a part file, renamed into place only when whole; on any
    failure or cancel the part file is removed."""
    part = local.with_name(f".{local.name}.part")
    with contextlib.suppress(FileNotFoundError):
        part.unlink()  # a part left by a controller killed mid-write
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0)
    try:
        with os.fdopen(os.open(part, flags, 0o600), "wb") as out:
            yield out
        os.replace(part, local)
    except BaseException:
        with contextlib.suppress(OSError):
            part.unlink()
        raise


async def stream_file(sftp: Any, remote: str, local: Path, budget: int) -> tuple[int, str]:
    """Copy `remote` to `local` (`private_file`), at most `budget` bytes: (bytes, sha256) once
    whole; OverCap past the budget."""
    digest = hashlib.sha256()
    got = 0
    with private_file(local) as out:
        # not `async with`: on a failure or a cancel, the remote close is not waited for (a
        # hostile host answers it never); the caller closes the connection, and with it this
        f = await sftp.open(remote, "rb")
        while True:
            chunk = await f.read(CHUNK)
            if not chunk:
                break
            got += len(chunk)
            if got > budget:
                raise OverCap(f"{got} bytes and more, over the {budget} left under the cap")
            digest.update(chunk)
            out.write(chunk)
        await f.close()
    return got, digest.hexdigest()


class TreeRefused(RentwatchError):
    """A host's folder tree over one of the walk's caps: the pull fails, costing that host."""

    title = "artifact tree refused"


MAX_REFUSALS = 200  # entries refused that a pull's record names one by one
SFTP_ERRORS = (SSHFailure, UnsafePath, TreeRefused, asyncssh.Error, OSError, TimeoutError)


@dataclass(frozen=True)
class TreeBounds:
    """What one pull's walk may take of a host's tree (a host can serve folders without end):
    files and bytes are capped in core/artifact_room.py, these bound the rest, and so the memory
    held. Past one of them the pull fails, naming the cap."""

    folders: int = 5_000
    depth: int = 32  # folders below an artifact's own
    path: int = 1024  # characters of a path under the job's folder
    name: int = 255  # characters of one name (NAME_MAX on Linux)
    listed: int = 100_000  # names over every listing of the walk
    listed_chars: int = 8 << 20  # their characters


@dataclass
class _Walked:
    folders: int = 0
    listed: int = 0
    listed_chars: int = 0


async def walk_tree(
    sftp: Any,
    base: str,
    tops: list[str],
    skip: Callable[[str], bool] = lambda rel: False,
    bounds: TreeBounds = TreeBounds(),
) -> AsyncGenerator[tuple[str, str | None], None]:
    """(path, None) for each regular file under `tops`, (path, why) for each entry refused;
    breadth-first, every folder queued counting against `bounds.folders`. TreeRefused past a cap.
    `skip(path)`: entries passed over in silence."""
    seen = _Walked()
    queue: deque[tuple[str, int]] = deque()
    for rel in tops:
        kind = await _kind(sftp, posixpath.join(base, rel))
        if kind == asyncssh.FILEXFER_TYPE_DIRECTORY:
            _count_folder(seen, rel, bounds)
            queue.append((rel, 0))
        else:
            yield rel, _why_not(kind)
    while queue:
        rel, depth = queue.popleft()
        found: list[tuple[str, str | None]] = []
        names = sftp.scandir(posixpath.join(base, rel))
        async with contextlib.aclosing(names):
            async for entry in names:
                name = entry.filename
                if name in (".", ".."):
                    continue
                seen.listed += 1
                seen.listed_chars += len(name)
                if seen.listed > bounds.listed or seen.listed_chars > bounds.listed_chars:
                    raise TreeRefused(
                        f"the host listed over {bounds.listed} names or {bounds.listed_chars} "
                        f"characters under {clean(rel, 80)}: not pulled"
                    )
                child = name if rel == "." else f"{rel}/{name}"
                if "/" in name or "\\" in name or "\0" in name or len(name) > bounds.name:
                    found.append((f"{rel}/{clean(name, 80)}", "unsafe name refused"))
                    continue
                if len(child) > bounds.path:
                    raise TreeRefused(
                        f"a path over {bounds.path} characters ({clean(child, 80)}): not pulled"
                    )
                if skip(child):
                    continue
                kind = entry.attrs.type
                if kind == asyncssh.FILEXFER_TYPE_UNKNOWN:  # a server that left it out
                    kind = await _kind(sftp, posixpath.join(base, child))
                if kind == asyncssh.FILEXFER_TYPE_DIRECTORY:
                    if depth + 1 > bounds.depth:
                        raise TreeRefused(
                            f"folders over {bounds.depth} deep ({clean(child, 80)}): not pulled"
                        )
                    _count_folder(seen, child, bounds)
                    queue.append((child, depth + 1))
                else:
                    found.append((child, _why_not(kind)))
        for item in found:
            yield item


def _count_folder(seen: _Walked, rel: str, bounds: TreeBounds) -> None:
    seen.folders += 1
    if seen.folders > bounds.folders:
        raise TreeRefused(f"over {bounds.folders} folders (at {clean(rel, 80)}): not pulled")


async def _kind(sftp: Any, remote: str) -> int | None:
    """What the host says is at `remote` (None: nothing)."""
    try:
        attrs = await sftp.lstat(remote)
    except asyncssh.SFTPError:
        return None
    return int(attrs.type)


def _why_not(kind: int | None) -> str | None:
    """Why an entry that is not a folder is not pulled (None: a regular file, pulled)."""
    if kind is None:
        return "missing"
    if kind == asyncssh.FILEXFER_TYPE_SYMLINK:
        return "symlink refused"
    if kind != asyncssh.FILEXFER_TYPE_REGULAR:
        return "not a regular file"
    return None


def _local(dest_root: Path, rel: str) -> Path:
    target = (dest_root / rel).resolve()
    root = dest_root.resolve()
    if root != target and root not in target.parents:
        raise UnsafePath(f"{rel!r} would be written outside {root}")
    return target


async def fetch_artifacts(
    conn: asyncssh.SSHClientConnection,
    job: Job,
    dest_root: Path,
    max_bytes: int = PULL_MAX_BYTES,
    max_files: int = PULL_MAX_FILES,
    stale: frozenset[str] = frozenset(),
    bounds: TreeBounds = TreeBounds(),
) -> list[dict[str, object]]:
    """Pull each artifact off the host: regular files only, never through a symlink, never outside
    `dest_root`; one record per file with size and sha256. Folders are walked within `bounds`,
    each file streamed under the caps; a file in `stale` is left there."""
    private_dirs(dest_root, dest_root)
    out: list[dict[str, object]] = []
    refused = 0  # refusals past the first MAX_REFUSALS are counted, not each recorded
    total = 0
    files = 0
    own = JOB_ROOT.removeprefix("~/").split("/")[0]
    sftp = await conn.start_sftp_client()
    try:
        base = job.workdir
        tops = [safe_relative(a.rstrip("/") or ".") for a in job.artifacts]
        walk = walk_tree(
            sftp,
            base,
            tops,
            # rentwatch's own folder on the host (`artifacts = ["."]`)
            skip=lambda rel: home_path(job.workdir, rel) == own,
            bounds=bounds,
        )
        async with contextlib.aclosing(walk):
            async for rel, why in walk:
                if why is None and rel in stale:
                    why = "unchanged since the job started here: not its output"
                if why is None and files >= max_files:
                    why = f"over the cap of {max_files} files"
                if why is not None:
                    refused += 1
                    if refused <= MAX_REFUSALS:
                        out.append({"path": rel, "error": why})
                    continue
                remote = posixpath.join(base, rel)
                local = _local(dest_root, rel)
                private_dirs(dest_root, local.parent)
                files += 1
                try:
                    size, digest = await stream_file(sftp, remote, local, max_bytes - total)
                except OverCap:
                    out.append({"path": rel, "error": "over the artifact size cap"})
                    continue
                total += size
                out.append({"path": rel, "bytes": size, "sha256": digest})
        if refused > MAX_REFUSALS:
            out.append({"path": "", "error": f"{refused - MAX_REFUSALS} more refused"})
    finally:
        # not `async with`: its exit waits for the host's answer, which a hostile host (or one
        # whose pull was cut by its deadline) never sends; the caller closes the connection
        sftp.exit()
    return out


def summary(records: list[dict[str, object]]) -> str:
    ok = [r for r in records if "sha256" in r]
    bad = [r for r in records if "error" in r]
    size = sum(int(str(r["bytes"])) for r in ok)
    text = f"{len(ok)} file(s), {size} bytes"
    if bad:
        text += f"; refused or missing: {json.dumps(bad)[:200]}"
    return text


PULL_TRIES = 3  # looks that try to pull an exited job's artifacts before it settles without


@dataclass(eq=False)
class Pulls:
    link: HostLink
    journal: Journal
    artifacts_root: Path
    # what the campaign may still pull off its hosts
    room: ArtifactRoom = field(default_factory=ArtifactRoom, init=False)
    kept_logs: set[tuple[str, int]] = field(default_factory=set, init=False)  # (job, attempt)

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

    async def keep_log(self, a: Attempt, job: JobState) -> bool:
        """Keep the last LOG_KEEP bytes of an ended job's output on the controller, once per
        run, and say where in the ledger; False when it was already. A host that does not
        answer leaves the ledger's tail as its last word."""
        if (job.name, job.attempts) in self.kept_logs:
            return False
        self.kept_logs.add((job.name, job.attempts))
        try:
            res = await self.link.run(a, log_command(job.job, LOG_KEEP))
        except SSHFailure as exc:
            self.journal.say(f"log    {job.name}: not pulled ({exc})")
            return True
        if not res.stdout:
            return True  # it printed nothing: nothing to keep
        path = log_path(self.artifacts_root, self.journal.campaign, job.name)
        private_dirs(self.artifacts_root, path.parent)
        with private_file(path) as f:
            f.write(res.stdout[-LOG_KEEP:])
        self.journal.fact(
            EventKind.NOTE,
            a,
            ok=True,
            reason=f"output of job {job.name} kept ({len(res.stdout)} bytes) at {path}",
            detail={"class": "job_log", "job": job.name, "path": str(path)},
        )
        return True
