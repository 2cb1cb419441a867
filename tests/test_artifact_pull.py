"""Artifacts are streamed (issue 30, item 5): the byte cap is counted on what arrives (a host's
lstat may say anything), the sha256 computed as it streams (memory stays bounded), partial
files are removed on failure or timeout, folders are 0700 and files 0600. A real asyncssh SFTP
server on loopback stands in for the host, with an lstat that lies and a read that can hang."""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import tracemalloc
from pathlib import Path

import asyncssh
import pytest
from rentwatch.core.campaign import Job
from rentwatch.engine.jobs.runner import fetch_artifacts


class Lying(asyncssh.SFTPServer):
    """Serves files under its root; `lstat` says each file is 10 bytes; reads of `hang`
    stall after the first chunk."""

    root: Path
    lie = True

    def __init__(self, chan: asyncssh.SSHServerChannel) -> None:
        super().__init__(chan, chroot=str(self.root).encode())

    def lstat(self, path: bytes) -> asyncssh.SFTPAttrs:
        attrs = asyncssh.SFTPAttrs.from_local(super().lstat(path))
        if self.lie and attrs.type == asyncssh.FILEXFER_TYPE_REGULAR:
            attrs.size = 10
        return attrs

    async def read(self, file_obj: object, offset: int, size: int) -> bytes:
        name = os.fsdecode(getattr(file_obj, "name", ""))
        if name.endswith("hang") and offset > 0:
            await asyncio.sleep(3600)
        return super().read(file_obj, offset, size)  # type: ignore[arg-type]


class NoAuth(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return False


async def _pull(host_root: Path, dest: Path, artifacts: tuple[str, ...], **kw: object):
    Lying.root = host_root
    key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.create_server(
        NoAuth, "127.0.0.1", 0, server_host_keys=[key], sftp_factory=Lying
    )
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncssh.connect(
            "127.0.0.1", port, known_hosts=None, username="u", client_keys=None
        ) as conn:
            job = Job("j", "true", artifacts=artifacts, workdir="/")
            timeout = kw.pop("timeout", None)
            work = fetch_artifacts(conn, job, dest, **kw)  # type: ignore[arg-type]
            return await (asyncio.wait_for(work, timeout) if timeout else work)
    finally:
        server.close()


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    (root / "out" / "sub").mkdir(parents=True)
    (root / "out" / "small").write_bytes(b"abc")  # lstat says 10: a real 3-byte file
    (root / "out" / "sub" / "big").write_bytes(os.urandom(3 * 1024 * 1024))
    return root


def test_the_cap_counts_what_arrives_not_what_lstat_says(host, tmp_path):
    dest = tmp_path / "dest"
    records = asyncio.run(_pull(host, dest, ("out",), max_bytes=1024 * 1024))
    by = {r["path"]: r for r in records}
    assert by["out/small"]["bytes"] == 3
    assert by["out/small"]["sha256"] == hashlib.sha256(b"abc").hexdigest()
    assert by["out/sub/big"]["error"] == "over the artifact size cap"
    assert not (dest / "out" / "sub" / "big").exists()
    leftovers = [p.name for p in dest.rglob("*") if p.name.endswith(".part")]
    assert leftovers == []


def test_a_file_under_the_cap_is_whole_hashed_and_private(host, tmp_path):
    old = os.umask(0o022)
    try:
        dest = tmp_path / "dest"
        records = asyncio.run(_pull(host, dest, ("out",)))
    finally:
        os.umask(old)
    big = host / "out" / "sub" / "big"
    (rec,) = [r for r in records if r["path"] == "out/sub/big"]
    assert rec["bytes"] == big.stat().st_size
    assert rec["sha256"] == hashlib.sha256(big.read_bytes()).hexdigest()
    assert (dest / "out" / "sub" / "big").read_bytes() == big.read_bytes()
    for p in [dest, *dest.rglob("*")]:
        want = 0o700 if p.is_dir() else 0o600
        assert stat.S_IMODE(p.stat().st_mode) == want, p


def test_a_pull_cut_by_its_deadline_leaves_no_partial_file(host, tmp_path):
    (host / "out" / "hang").write_bytes(os.urandom(2 * 1024 * 1024))
    dest = tmp_path / "dest"
    with pytest.raises(TimeoutError):
        asyncio.run(_pull(host, dest, ("out/hang",), timeout=3.0))
    assert [p.name for p in dest.rglob("*") if p.is_file()] == []


def test_memory_stays_bounded_whatever_the_files_size(host, tmp_path, monkeypatch):
    (host / "out" / "sub" / "big").write_bytes(os.urandom(24 * 1024 * 1024))
    monkeypatch.setattr(Lying, "lie", False)  # an honest host: the whole file comes
    tracemalloc.start()
    try:
        (rec,) = asyncio.run(_pull(host, tmp_path / "dest", ("out/sub/big",)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rec["bytes"] == 24 * 1024 * 1024
    assert peak < 12 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB for a 24 MB file"


def test_a_cap_on_files_per_pull(host, tmp_path):
    for i in range(5):
        (host / "out" / f"f{i}").write_bytes(b"x")
    records = asyncio.run(_pull(host, tmp_path / "dest", ("out",), max_files=3))
    assert sum(1 for r in records if "sha256" in r) == 3
    assert sum(1 for r in records if "files" in str(r.get("error", ""))) == 4
