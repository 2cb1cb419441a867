"""The rescue of a moved job's newer state, step by step against fakes: when it is asked, what
a refusal, a copy that never lands, a folder still growing, a dropped session and a copy that
settles each lead to. The end to end run is `tests/test_rescue.py`."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rentwatch.core.bidding.tier import RESCUE_SETTLE_S, RESCUE_WAIT_S
from rentwatch.core.campaign import Job
from rentwatch.core.jobs import JobState
from rentwatch.core.lifecycle import Phase
from rentwatch.engine.hosts.ssh import SSHFailure
from rentwatch.engine.jobs.rescue import Rescues
from rentwatch.engine.rentals import Writer
from rentwatch.market.errors import ApiError
from rentwatch.sim.copies import copy_tree

JOB = Job(name="fit", run="train", checkpoint="ckpt", ref_gpu="RTX 4090", ref_hours=1.0)
SRC, DST = 11, 22


@dataclass
class FakeLink:
    listings: list[Any] = field(default_factory=list)  # bytes, or an exception to raise
    sent: list[str] = field(default_factory=list)

    async def run(self, a, command: str, stdin=None, timeout: float = 60):
        self.sent.append(command)
        if command.startswith("ls "):
            got = self.listings.pop(0) if self.listings else b""
            if isinstance(got, Exception):
                raise got
            return SimpleNamespace(stdout=got, exit_status=0)
        if "printf" in command:
            return SimpleNamespace(stdout=b"/root", exit_status=0)
        return SimpleNamespace(stdout=b"", exit_status=0)


@dataclass
class FakeMarket:
    refuse: bool = False
    asked: list[tuple] = field(default_factory=list)

    async def copy_between(self, *args) -> None:
        self.asked.append(args)
        if self.refuse:
            raise ApiError(404, "no_such_user", "No such user.")

    async def cancel_copies_to(self, dst_id: int) -> None:
        self.asked.append(("cancel", dst_id))
        if self.refuse:
            raise ApiError(400, "invalid_args", "Remote instance does not have an open port")


class FakeJournal:
    def __init__(self) -> None:
        self.facts: list[dict[str, Any]] = []
        self.writer = Writer(self)  # type: ignore[arg-type]  (the rentals' updates go through it)

    def fact(self, kind, a, **kw) -> int:
        self.facts.append({"kind": kind.value, **kw})
        return 0

    def say(self, line: str) -> None:
        pass


def _source(phase=Phase.STOPPED, ports: int | None = 20, status: str = "stopped"):
    """The paused rental as the fleet holds it: its phase, its offer's open ports, its status."""
    offer = SimpleNamespace(direct_port_count=ports)
    return SimpleNamespace(life=SimpleNamespace(phase=phase), offer=offer, status=status)


def _rescues(phase=Phase.STOPPED, refuse=False, listings=(), source=None):
    source = source or _source(phase)
    fleet = SimpleNamespace(get=lambda iid: source if iid == SRC else None)
    link = FakeLink(list(listings))
    market, journal = FakeMarket(refuse), FakeJournal()
    return Rescues(market, fleet, link, journal), market, link, journal  # type: ignore[arg-type]


def _go(coro):
    return asyncio.run(coro)


HOST = SimpleNamespace(instance_id=DST)


def _taken() -> JobState:
    """The job as the engine holds it while its state comes over: taken by its next host."""
    job = JobState(JOB)
    job.status, job.instance_id = "running", DST
    return job


def test_asked_only_for_work_worth_the_wait_off_a_rental_that_keeps_its_disk():
    for lost, phase, want in (
        (600.0, Phase.STOPPED, True),
        (60.0, Phase.STOPPED, False),  # a minute of work: not worth the next host's wait
        (None, Phase.STOPPED, False),
        (600.0, Phase.DESTROYED, False),  # its disk went with it
    ):
        r, market, _, journal = _rescues(phase)
        job = _taken()
        r.outbid(job, SRC, lost)
        assert _go(r.begin(HOST, job, 100.0)) is want
        assert bool(market.asked) is want
        if want:
            [(src, src_path, dst, dst_path)] = market.asked
            # the checkpoint itself, no trailing slash (it may be a file: rsync refuses `file/`)
            assert (src, src_path, dst) == (SRC, "/root/ckpt", DST)
            assert dst_path == "/root/.rentwatch/jobs/fit/rescue/"
            assert journal.facts[-1]["detail"]["stage"] == "asked" and r.waiting(job)
    r, market, _, _ = _rescues()
    job = _taken()
    r.outbid(job, DST, 600.0)  # the same rental again: its disk is right there
    assert not _go(r.begin(HOST, job, 100.0)) and not market.asked


def test_a_refused_copy_starts_the_job_from_what_was_pulled():
    r, _, _, journal = _rescues(refuse=True)
    job = _taken()
    r.outbid(job, SRC, 600.0)
    assert not _go(r.begin(HOST, job, 100.0)) and not r.waiting(job)
    assert journal.facts[-1]["ok"] is False and "No such user" in journal.facts[-1]["reason"]


def test_no_copy_is_asked_off_a_host_without_open_ports_or_offline():
    """Vast copies between instances over SSH (data-movement.mdx): a proxy-only host
    (`direct_port_count` 0) or one offline sends nothing; the job starts from what was pulled,
    the ledger saying why, and no copy is asked that would be refused or never land."""
    for source, word in (
        (_source(ports=0), "no open port"),
        (_source(status="offline"), "offline"),
    ):
        r, market, _, journal = _rescues(source=source)
        job = _taken()
        r.outbid(job, SRC, 600.0)
        assert not _go(r.begin(HOST, job, 100.0)) and not r.waiting(job)
        assert not market.asked
        [fact] = journal.facts
        assert fact["ok"] is False and fact["detail"]["stage"] == "skipped"
        assert word in fact["reason"] and "it starts from" in fact["reason"]
    # ports unknown (an offer the ledger did not keep): asked, and the market decides
    r, market, _, _ = _rescues(source=_source(ports=None))
    job = _taken()
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 100.0)) and market.asked


def test_the_markets_open_port_refusal_is_said_as_such():
    r, market, _, journal = _rescues()

    async def no_port(*args) -> None:
        raise ApiError(400, "invalid_args", "Remote instance does not have an open port")

    market.copy_between = no_port  # type: ignore[method-assign]
    job = _taken()
    r.outbid(job, SRC, 600.0)
    assert not _go(r.begin(HOST, job, 100.0)) and not r.waiting(job)
    fact = journal.facts[-1]
    assert fact["detail"]["stage"] == "refused"
    assert "no open port for the copy's SSH" in fact["reason"]


def test_a_wait_ends_at_once_when_the_source_goes_offline():
    source = _source()
    r, market, _, journal = _rescues(listings=[b""] * 100, source=source)
    job = _taken()
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 0.0))
    assert not _go(r.step(HOST, job, 60.0))
    source.status = "offline"  # nothing comes off a dark host: no point waiting it out
    assert _go(r.step(HOST, job, 120.0)) and not r.waiting(job)
    fact = journal.facts[-1]
    assert fact["detail"]["stage"] == "lost" and fact["detail"]["source_offline"]
    assert "went offline" in fact["reason"] and "it starts from" in fact["reason"]
    assert market.asked[-1] == ("cancel", DST)


def test_it_waits_while_the_folder_grows_or_a_look_fails_and_lands_once_settled():
    grown = [b"", b"a 10\n", SSHFailure("dropped"), b"a 20\n", b"a 20\n"]
    r, _, link, journal = _rescues(listings=grown)
    job = _taken()
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 0.0))
    t = 0.0
    for _ in range(4):  # empty, growing, no answer, changed again: not yet
        t += RESCUE_SETTLE_S + 1
        assert not _go(r.step(HOST, job, t))
    t += RESCUE_SETTLE_S + 1
    assert _go(r.step(HOST, job, t)) and not r.waiting(job)
    assert journal.facts[-1]["detail"]["stage"] == "landed" and journal.facts[-1]["ok"]
    assert any('cp -a ~/.rentwatch/jobs/fit/rescue/ckpt "$HOME"/ckpt' in c for c in link.sent)


def test_a_copy_that_never_lands_is_given_up_at_its_deadline_and_cancelled():
    r, market, link, journal = _rescues(listings=[b""] * 100)
    job = _taken()
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 0.0))
    assert not _go(r.step(HOST, job, RESCUE_WAIT_S - 1))
    assert ("cancel", DST) not in market.asked
    assert _go(r.step(HOST, job, RESCUE_WAIT_S + 1))
    assert journal.facts[-1]["detail"]["stage"] == "lost" and journal.facts[-1]["ok"] is False
    assert not any("cp -a" in c for c in link.sent)
    # it bills bandwidth on both machines while it runs: cancelled, and what landed removed
    assert market.asked[-1] == ("cancel", DST)
    assert journal.facts[-1]["detail"]["cancel"] == "asked"
    assert link.sent[-1] == "rm -rf ~/.rentwatch/jobs/fit/rescue"


def test_a_cancel_the_market_refuses_is_said_and_the_job_starts_all_the_same():
    r, market, _, journal = _rescues(listings=[b""] * 100)
    job = _taken()
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 0.0))
    market.refuse = True
    assert _go(r.step(HOST, job, RESCUE_WAIT_S + 1)) and not r.waiting(job)
    said = journal.facts[-1]["detail"]["cancel"]
    assert said.startswith("not taken") and "open port" in said


def test_a_job_requeued_while_it_waits_waits_no_more_and_its_next_host_asks_again():
    r, market, _, _ = _rescues()
    job = _taken()
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 0.0)) and r.waiting(job)
    job.instance_id = DST
    r.forget(job)  # its host went down while the copy was coming
    assert not r.waiting(job)
    _go(r.sweep())  # and the copy into it, which bills bandwidth while it runs, is cancelled
    assert market.asked[-1] == ("cancel", DST) and not r.orphans
    other = SimpleNamespace(instance_id=33)
    job.instance_id = 33  # the next host takes it
    assert _go(r.begin(other, job, 50.0)) and r.waiting(job)
    assert [a[2] for a in market.asked if a[0] != "cancel"] == [DST, 33]


class ShellLink:
    """Runs the rescue's commands in a real shell whose $HOME is a folder of the test's."""

    def __init__(self, home: Path):
        self.home = home
        self.sent: list[str] = []

    async def run(self, a, command: str, stdin=None, timeout: float = 60):
        self.sent.append(command)
        p = subprocess.run(
            ["sh", "-c", command], capture_output=True, env={**os.environ, "HOME": str(self.home)}
        )
        return SimpleNamespace(stdout=p.stdout, exit_status=p.returncode)


class SimCopies:
    """The simulator's copy rule (rsync's), between two homes, landing at once."""

    def __init__(self, src_home: Path, dst_home: Path):
        self.src_home, self.dst_home = src_home, dst_home

    async def copy_between(self, src_id, src_path, dst_id, dst_path) -> None:
        here = self.src_home / Path(src_path).relative_to(self.dst_home)
        there = self.dst_home / Path(dst_path).relative_to(self.dst_home)
        there.mkdir(parents=True, exist_ok=True)
        copy_tree(here, there, contents=src_path.endswith("/"))


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_the_copied_state_replaces_the_pushed_one_a_file_for_a_file(tmp_path, kind):
    """A checkpoint may be one file (`ckpt.pt`) or a folder: the state copied off the paused
    rental takes the checkpoint's place as what it was, over the older pushed copy, with no
    stale file of the pushed copy left beside it."""
    src_home, dst_home = tmp_path / "a", tmp_path / "b"
    name = "ckpt.pt" if kind == "file" else "ckpt"
    if kind == "file":
        src_home.mkdir()
        (src_home / name).write_bytes(b"step 9")
        dst_home.mkdir()
        (dst_home / name).write_bytes(b"step 3")  # what was pulled, pushed back
    else:
        (src_home / name).mkdir(parents=True)
        (src_home / name / "step").write_text("9")
        (dst_home / name).mkdir(parents=True)
        (dst_home / name / "step").write_text("3")
        (dst_home / name / "old-only").write_text("stale")
    job = JobState(dataclasses.replace(JOB, checkpoint=name))
    job.status, job.instance_id = "running", DST
    source = _source()
    fleet = SimpleNamespace(get=lambda iid: source if iid == SRC else None)
    link = ShellLink(dst_home)
    r = Rescues(SimCopies(src_home, dst_home), fleet, link, FakeJournal())  # type: ignore[arg-type]
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 0.0))
    t = 0.0
    while r.waiting(job):
        t += RESCUE_SETTLE_S + 1
        _go(r.step(HOST, job, t))
    assert r.journal.facts[-1]["detail"]["stage"] == "landed"  # type: ignore[attr-defined]
    there = dst_home / name
    if kind == "file":
        assert there.is_file() and there.read_bytes() == b"step 9"
    else:
        assert sorted(p.name for p in there.iterdir()) == ["step"]
        assert (there / "step").read_text() == "9"
    assert not (dst_home / ".rentwatch/jobs/fit/rescue").exists()


def test_a_job_that_leaves_its_host_while_the_copy_settles_is_not_started_there():
    # the look and the move into place are awaits: an outbid of the next host meanwhile queues
    # the job again; a "landed" there (and a launch) named a host the job had left
    r, _, link, journal = _rescues(listings=[b"a 20\n"] * 10)
    job = _taken()
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 0.0))
    assert not _go(r.step(HOST, job, RESCUE_SETTLE_S + 1))  # seen once
    moved = link.run

    async def outbid_mid_move(a, command, stdin=None, timeout=60.0):
        if "cp -a" in command:
            job.status, job.instance_id = "pending", None  # `reap`, while the host answered
        return await moved(a, command, stdin, timeout)

    link.run = outbid_mid_move  # type: ignore[method-assign]
    assert not _go(r.step(HOST, job, 2 * RESCUE_SETTLE_S + 2))
    assert not [f for f in journal.facts if f["detail"].get("stage") == "landed"]
    assert r.paused[job.name].instance_id == SRC  # its state still waits there, for the next
