"""Artifacts are streamed (issue 30, item 5): the byte cap is counted on what arrives (a host's
lstat may say anything), the sha256 computed as it streams (memory stays bounded), partial
files are removed on failure or timeout, folders are 0700 and files 0600. A real asyncssh SFTP
server on loopback stands in for the host, with an lstat that lies and a read that can hang."""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
import subprocess
import time
import tracemalloc
from pathlib import Path

import asyncssh
import pytest
from rentwatch.core.campaign import Job
from rentwatch.engine.jobs.pull import fetch_artifacts
from rentwatch.engine.jobs.runner import (
    job_dir,
    launch_command,
    parse_stale,
    stale_command,
)


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
    factory = kw.pop("server", Lying)
    server = await asyncssh.create_server(
        NoAuth, "127.0.0.1", 0, server_host_keys=[key], sftp_factory=factory
    )
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncssh.connect(
            "127.0.0.1", port, known_hosts=None, username="u", client_keys=None
        ) as conn:
            workdir = str(kw.pop("workdir", "/"))
            job = Job("j", "true", artifacts=artifacts, workdir=workdir)
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


def test_files_unchanged_since_the_jobs_start_are_left_as_anothers(host, tmp_path):
    # two jobs sharing a workdir on one host: the later one's out/ still holds the earlier
    # one's files. The host says which (stale_command); the pull leaves those and says so
    stale = frozenset({"out/small"})
    by = {r["path"]: r for r in asyncio.run(_pull(host, tmp_path / "d", ("out",), stale=stale))}
    assert by["out/small"] == {
        "path": "out/small",
        "error": "unchanged since the job started here: not its output",
    }
    assert "sha256" in by["out/sub/big"] and not (tmp_path / "d" / "out" / "small").exists()


def test_the_stale_files_are_those_no_change_touched_since_the_start_mark(tmp_path):
    # the real command in a real shell: by change time, so a file this job extracted or copied
    # with an old mtime (tar x, cp -p) is still its own, and an earlier job's is not
    home = tmp_path / "home"
    (home / "work" / "out").mkdir(parents=True)
    job = Job("j", "true", artifacts=("out/", "one.txt"), workdir="work")
    earlier = home / "work" / "out" / "earlier.bin"
    earlier.write_bytes(b"x")
    (home / "work" / "one.txt").write_text("earlier")
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}

    def sh(cmd: str) -> bytes:
        return subprocess.run(["sh", "-c", cmd], cwd=home, env=env, capture_output=True).stdout

    assert parse_stale(sh(stale_command(job))) == frozenset()  # no mark yet: all its own
    time.sleep(0.05)
    sh(launch_command(job).split(" && (export")[0])  # the launch's mark, not the job itself
    assert (home / job_dir("j").removeprefix("~/") / "started").is_file()
    time.sleep(0.05)
    mine = home / "work" / "out" / "mine.bin"
    mine.write_bytes(b"y")
    os.utime(mine, (1_000_000_000, 1_000_000_000))  # an mtime from 2001, as tar x leaves it
    assert parse_stale(sh(stale_command(job))) == {"out/earlier.bin", "one.txt"}
    # a retry keeps the first attempt's mark: what that attempt wrote is still the job's
    time.sleep(0.05)
    sh(launch_command(job, first=False).split(" && (export")[0])
    assert parse_stale(sh(stale_command(job))) == {"out/earlier.bin", "one.txt"}
    time.sleep(0.05)
    sh(launch_command(job, first=True).split(" && (export")[0])  # a new campaign's first
    assert parse_stale(sh(stale_command(job))) == {"out/earlier.bin", "one.txt", "out/mine.bin"}
    assert parse_stale(b"out//a\0/etc/passwd\0\0./b\0") == {"out/a", "b"}


def test_output_written_at_once_after_the_start_mark_is_the_jobs_own(tmp_path):
    # a change time is read from the kernel's tick: a file a quick job writes in the tick of
    # the mark has the mark's time, and `! -cnewer` called it an earlier job's (a CI failure:
    # a one-line job's only artifact left on the host)
    home = tmp_path / "home"
    (home / "work" / "out").mkdir(parents=True)
    job = Job("j", "true", artifacts=("out/",), workdir="work")
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    for first in (True, False):  # a first attempt's mark, and a retry's where none is yet
        for i in range(20):
            launch = launch_command(job, first=first).split(" && (export")[0]
            script = f"rm -f {job_dir('j')}/started && {launch} && echo {i} > work/out/quick{i}.bin"
            subprocess.run(["sh", "-c", script], cwd=home, env=env, check=True)
            out = subprocess.run(
                ["sh", "-c", stale_command(job)], cwd=home, env=env, capture_output=True
            ).stdout
            assert f"out/quick{i}.bin" not in parse_stale(out)


def test_the_whole_home_as_an_artifact_leaves_rentwatchs_own_folder(host, tmp_path):
    # `artifacts = ["."]` from the login folder: rentwatch's job files (exit, log, pid, the
    # start mark) are not the job's output
    (host / ".rentwatch" / "jobs" / "j").mkdir(parents=True)
    (host / ".rentwatch" / "jobs" / "j" / "exit").write_text("0\n")
    records = asyncio.run(_pull(host, tmp_path / "d", (".",), workdir="."))
    paths = {r["path"] for r in records}
    assert paths == {"out/small", "out/sub/big"}, paths


class Bottomless(asyncssh.SFTPServer):
    """A hostile host's tree (issue 45, item 5): `out` and every folder under it list `width`
    sub-folders, without end, with a long name each. After `listings` listings it answers
    with an error, so a walk that would go on for ever ends (and fails) within the test: a
    bounded walk is refused within 13 listings (wide) or 33 (deep)."""

    width = 400
    pad = 40
    listings = 40
    served = 0

    def __init__(self, chan: asyncssh.SSHServerChannel) -> None:
        super().__init__(chan)

    def lstat(self, path: bytes) -> asyncssh.SFTPAttrs:
        return asyncssh.SFTPAttrs(type=asyncssh.FILEXFER_TYPE_DIRECTORY, permissions=0o40755)

    async def scandir(self, path: bytes):
        Bottomless.served += 1
        if Bottomless.served > self.listings:
            raise asyncssh.SFTPFailure("no more")
        attrs = asyncssh.SFTPAttrs(type=asyncssh.FILEXFER_TYPE_DIRECTORY, permissions=0o40755)
        for i in range(self.width):
            yield asyncssh.SFTPName(f"folder-{i:04d}-{'x' * self.pad}".encode(), None, attrs)


@pytest.mark.parametrize(
    "width, pad, cap",
    [(400, 40, "over 5000 folders"), (1, 0, "folders over 32 deep")],
    ids=["wide", "deep"],
)
def test_a_bottomless_tree_fails_the_pull_with_memory_flat(tmp_path, monkeypatch, width, pad, cap):
    from rentwatch.engine.jobs.pull import TreeRefused

    monkeypatch.setattr(Bottomless, "width", width)
    monkeypatch.setattr(Bottomless, "pad", pad)
    monkeypatch.setattr(Bottomless, "served", 0)
    tracemalloc.start()
    try:
        with pytest.raises(TreeRefused, match=cap):
            asyncio.run(_pull(tmp_path, tmp_path / "dest", ("out",), server=Bottomless))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # bounded by the caps, not by the tree: 5,000 folders queued of 60-character paths
    assert peak < 40 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
    assert not [p for p in (tmp_path / "dest").rglob("*") if p.is_file()]


def test_path_length_and_names_listed_are_capped(tmp_path, monkeypatch):
    from rentwatch.engine.jobs.pull import TreeBounds, TreeRefused

    monkeypatch.setattr(Bottomless, "width", 3)
    monkeypatch.setattr(Bottomless, "served", 0)
    with pytest.raises(TreeRefused, match="a path over 200 characters"):
        asyncio.run(
            _pull(
                tmp_path, tmp_path / "d", ("out",), server=Bottomless, bounds=TreeBounds(path=200)
            )
        )
    monkeypatch.setattr(Bottomless, "width", 400)
    monkeypatch.setattr(Bottomless, "served", 0)
    with pytest.raises(TreeRefused, match="listed over 1000 names"):
        asyncio.run(
            _pull(
                tmp_path,
                tmp_path / "d",
                ("out",),
                server=Bottomless,
                bounds=TreeBounds(listed=1000),
            )
        )
