"""One artifact file off a host, streamed: the byte cap and the sha256 on what arrives, written 0600
to a part file renamed into place only when whole; and the folders a pull walks, bounded. What
the host says about a file's size decides nothing: a host reported 10 bytes to `lstat` and then
served 2.4 GB."""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import asyncssh

from ...core.errors import RentwatchError
from ...core.text import clean

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


# What one pull's walk may take of a host's tree (a host can serve folders without end): files
# and bytes are capped in core/artifact_room.py, these bound the rest, and so the memory held.
# Past one of them the pull fails, naming the cap.
PULL_MAX_FOLDERS = 5_000
PULL_MAX_DEPTH = 32  # folders below an artifact's own
PULL_MAX_PATH = 1024  # characters of a path under the job's folder
PULL_MAX_NAME = 255  # characters of one name (NAME_MAX on Linux)
PULL_MAX_LISTED = 100_000  # names over every listing of the walk
PULL_MAX_LISTED_CHARS = 8 << 20  # their characters


class TreeRefused(RentwatchError):
    """A host's folder tree over one of the walk's caps: the pull fails, costing that host."""

    title = "artifact tree refused"


@dataclass(frozen=True)
class TreeBounds:
    folders: int = PULL_MAX_FOLDERS
    depth: int = PULL_MAX_DEPTH
    path: int = PULL_MAX_PATH
    name: int = PULL_MAX_NAME
    listed: int = PULL_MAX_LISTED
    listed_chars: int = PULL_MAX_LISTED_CHARS


PULL_BOUNDS = TreeBounds()


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
    bounds: TreeBounds = PULL_BOUNDS,
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
