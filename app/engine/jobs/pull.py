"""One artifact file off a host, streamed: the byte cap counted on what arrives, the sha256
computed as it arrives, written 0600 to a part file renamed into place only when whole.

Why (issue 30, item 5): a host's SFTP server reported a file as 10 bytes to the first `lstat`
and then served 2.4 GB, pulled against a 2 GiB cap and recorded as ok, while a real 3-byte
file was refused "over the cap"; the sha256 came from `read_bytes()` (the controller peaked
at 2.47 GB), and a timed-out pull left its partial file behind. What the host says about a
file's size decides nothing here.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any

CHUNK = 256 * 1024  # bytes per SFTP read: memory held per pull, whatever the file's size


class OverCap(Exception):
    """The file went past the bytes the pull had left: nothing of it is kept."""


def private_dirs(root: Path, leaf: Path) -> None:
    """`leaf` and every folder between `root` and it made and kept 0700 (artifacts are the
    operator's: a job's outputs, its checkpoints)."""
    leaf.mkdir(parents=True, exist_ok=True, mode=0o700)
    here = leaf
    while True:
        with contextlib.suppress(OSError):
            if os.stat(here).st_mode & 0o077:
                os.chmod(here, 0o700)
        if here == root or root not in here.parents:
            break
        here = here.parent


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def stream_file(sftp: Any, remote: str, local: Path, budget: int) -> tuple[int, str]:
    """Copy `remote` to `local` through `sftp` (asyncssh's client), at most `budget` bytes:
    (bytes, sha256) once whole; OverCap past the budget. On any failure or cancel (the
    pull's deadline) the part file is removed and `local` is left as it was."""
    part = local.with_name(f".{local.name}.part")
    with contextlib.suppress(FileNotFoundError):
        part.unlink()  # a part left by a controller killed mid-pull
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(part, flags, 0o600)
    digest = hashlib.sha256()
    got = 0
    try:
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
            _write_all(fd, chunk)
        await f.close()
        os.close(fd)
        fd = -1
        os.replace(part, local)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            part.unlink()
        raise
    return got, digest.hexdigest()
