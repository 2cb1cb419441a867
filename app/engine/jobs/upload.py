"""The campaign's `upload`: the operator's files pushed over SFTP into a job's folder on a proven
host before its first job there; regular files only, each sha256 in the ledger.

A campaign file may come from someone else, so each path must resolve inside the upload root (the
campaign file's folder, or `--upload-root`); nothing hidden goes, and no private key (rentwatch's
own, one named as OpenSSH names them, or one whose first bytes say so)."""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from ...core.errors import ConfigError, RentwatchError
from ...core.jobs import JobState
from ...core.text import clean
from ...ledger import EventKind
from ..attempt import Attempt
from ..hosts.link import HostLink
from ..journal import Journal
from .pull import CHUNK, SFTP_ERRORS
from .runner import safe_relative

HEAD_BYTES = 4096
# OpenSSH's default key names (ssh-keygen(1), FILES), with their certificates and .pub halves
_KEY_NAME = re.compile(r"^id_(rsa|dsa|ecdsa|ecdsa_sk|ed25519|ed25519_sk|xmss)(-cert)?(\.pub)?$")
# PEM and OpenSSH armour of a private key: "-----BEGIN [RSA |EC |OPENSSH |ENCRYPTED ]PRIVATE
# KEY-----", and PGP's "-----BEGIN PGP PRIVATE KEY BLOCK-----"
_KEY_ARMOUR = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY")


def looks_like_key(head: bytes, name: str) -> bool:
    """Whether a file whose first bytes are `head` and whose name is `name` is a key."""
    return bool(_KEY_NAME.match(name) or _KEY_ARMOUR.search(head))


def _head(path: Path) -> bytes:
    with open(path, "rb", buffering=0) as f:
        return f.read(HEAD_BYTES)


def _is_own_key(path: Path, own_keys: Iterable[Path]) -> bool:
    for key in own_keys:
        for k in (key, key.with_name(key.name + ".pub")):
            try:
                if os.path.samefile(path, k):
                    return True
            except OSError:
                continue
    return False


def folder_files(top: Path) -> Iterator[Path]:
    """The regular files under `top` an upload sends: no symlink followed, no dot-entry entered."""
    for folder, subs, names in os.walk(top):  # a linked folder is never entered
        subs[:] = sorted(s for s in subs if not s.startswith("."))
        for name in sorted(names):
            p = Path(folder) / name
            if not name.startswith(".") and p.is_file() and not p.is_symlink():
                yield p


def check_uploads(
    paths: Iterable[str], here: Path, root: Path | None = None, own_keys: Iterable[Path] = ()
) -> tuple[str, ...]:
    """Each upload as the path to push, or a ConfigError naming the first that breaks the rule.
    A relative path is read from `here` (the campaign file's folder); every path must resolve
    inside `root` (default: `here`). `own_keys` are rentwatch's SSH keys."""
    root = here if root is None else root
    try:
        base = root.resolve(strict=True)
    except OSError:
        raise ConfigError(f"upload root {clean(str(root), 300)} does not exist") from None
    if not base.is_dir():
        raise ConfigError(f"upload root {clean(str(root), 300)} is not a folder")
    keys = tuple(own_keys)
    out: list[str] = []
    for raw in paths:
        shown = clean(raw, 300)
        where = here / raw  # an absolute path stays itself: it must still resolve inside
        if not os.path.lexists(where):
            raise ConfigError(f"upload: no such file or folder: {clean(str(where), 300)}")
        if where.is_symlink():
            raise ConfigError(
                f"upload: {shown} is a symlink (never followed): name what it points to"
            )
        real = where.resolve()
        if not real.is_relative_to(base):
            raise ConfigError(
                f"upload: {shown} resolves to {clean(str(real), 300)}, outside the upload root "
                f"{clean(str(base), 300)} (the campaign file's folder, or --upload-root)"
            )
        hidden = [part for part in real.relative_to(base).parts if part.startswith(".")]
        if hidden:
            raise ConfigError(
                f"upload: {shown} is hidden ({clean(hidden[0], 100)}): dotfiles and dot-folders "
                "such as .ssh are never uploaded"
            )
        if real.is_file():
            files = [real]
        elif real.is_dir():
            files = list(folder_files(real))
        else:
            raise ConfigError(f"upload: {shown} is neither a file nor a folder")
        for f in files:
            if _is_own_key(f, keys) or looks_like_key(_head(f), f.name):
                raise ConfigError(
                    f"upload: {clean(str(f), 300)} is a private key: keys never go to a host"
                )
        out.append(str(real))
    return tuple(out)


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
