"""The campaign's `upload`: the operator's files pushed over SFTP into a job's folder on a proven
host before its first job there; regular files only, each sha256 in the ledger."""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from ...core.errors import RentwatchError
from ...core.jobs import JobState
from ...ledger import EventKind
from ..attempt import Attempt
from ..hosts.link import HostLink
from ..journal import Journal
from .pull import CHUNK, SFTP_ERRORS
from .runner import safe_relative
from .upload_rule import HEAD_BYTES, folder_files, looks_like_key

MAX_UPLOAD_BYTES = 4 << 30  # over all of a campaign's uploads, each time they are pushed
MAX_UPLOAD_FILES = 20_000


class UploadError(RentwatchError):
    title = "upload"


def local_files(paths: Sequence[str]) -> Iterator[tuple[Path, str]]:
    """(local file, its path under the job folder) for each upload, by the upload rule."""
    for raw in paths:
        top = Path(raw)
        if top.is_symlink() or not top.exists():
            raise UploadError(f"{raw}: no such file or folder (or a symlink, not followed)")
        if top.is_file():
            yield top, top.name
            continue
        for p in folder_files(top):
            yield p, posixpath.join(top.name, p.relative_to(top).as_posix())


async def push_uploads(
    conn: asyncssh.SSHClientConnection, paths: Sequence[str], workdir: str
) -> list[dict[str, object]]:
    """Every upload into `workdir` on the host; a record (path, bytes, sha256) per file."""
    files = list(local_files(paths))
    if len(files) > MAX_UPLOAD_FILES:
        raise UploadError(f"{len(files)} files to upload, over the cap of {MAX_UPLOAD_FILES}")
    total = sum(p.stat().st_size for p, _ in files)
    if total > MAX_UPLOAD_BYTES:
        raise UploadError(f"{total} bytes to upload, over the cap of {MAX_UPLOAD_BYTES}")
    out: list[dict[str, object]] = []
    sftp = await conn.start_sftp_client()
    try:
        for local, rel in files:
            remote = posixpath.join(workdir, safe_relative(rel))
            parent = posixpath.dirname(remote)
            if parent and parent != ".":
                await sftp.makedirs(parent, exist_ok=True)
            digest, size = hashlib.sha256(), 0
            with open(os.open(local, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as src:
                head = src.read(CHUNK)
                # checked again as it is read: the file may have changed since the campaign
                # was checked
                if looks_like_key(head[:HEAD_BYTES], local.name):
                    raise UploadError(f"{local} is a private key: keys never go to a host")
                async with sftp.open(remote, "wb") as f:
                    chunk = head
                    while chunk:
                        digest.update(chunk)
                        size += len(chunk)
                        await f.write(chunk)
                        chunk = src.read(CHUNK)
            out.append({"path": rel, "bytes": size, "sha256": digest.hexdigest()})
    finally:
        sftp.exit()
    return out


@dataclass(eq=False)
class Uploads:
    """The campaign's uploads, pushed into a job's folder on a host once per host and folder
    (a restarted controller pushes them again: it overwrites), each push in the ledger."""

    paths: tuple[str, ...]
    link: HostLink
    journal: Journal
    _done: set[tuple[int, str]] = field(default_factory=set, init=False)

    async def push(self, a: Attempt, job: JobState, now: float) -> tuple[str, bool] | None:
        """None: in place (or nothing to push). Else why not, and whether it is the host's
        fault (a local file that cannot be read would fail on every host alike)."""
        key = (a.instance_id, job.job.workdir)
        if not self.paths or key in self._done:
            return None
        try:
            records = await self.link.on_connection(
                a, lambda conn: push_uploads(conn, self.paths, job.job.workdir)
            )
        except UploadError as exc:
            return f"could not upload: {exc}", False
        except SFTP_ERRORS as exc:
            return f"could not upload to its host: {exc}", True
        self._done.add(key)
        size = sum(int(str(r["bytes"])) for r in records)
        self.journal.fact(
            EventKind.UPLOADED,
            a,
            at=now,
            reason=f"uploaded {len(records)} file(s), {size} bytes to {job.job.workdir}",
            detail={"workdir": job.job.workdir, "files": records[:500], "job": job.name},
        )
        self.journal.say(f"upload {len(records)} file(s), {size} bytes -> i:{a.instance_id}")
        return None
