"""The rescue of a moved job's newer state, step by step against fakes: when it is asked, what
a refusal, a copy that never lands, a folder still growing, a dropped session and a copy that
settles each lead to. The end to end run is `tests/test_rescue.py`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from rentwatch.core.bidding import RESCUE_SETTLE_S, RESCUE_WAIT_S
from rentwatch.core.campaign import Job
from rentwatch.core.jobs import JobState
from rentwatch.core.lifecycle import Phase
from rentwatch.engine.hosts.ssh import SSHFailure
from rentwatch.engine.jobs.rescue import Rescues
from rentwatch.market.errors import ApiError

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


class FakeJournal:
    def __init__(self) -> None:
        self.facts: list[dict[str, Any]] = []

    def fact(self, kind, a, **kw) -> int:
        self.facts.append({"kind": kind.value, **kw})
        return 0

    def say(self, line: str) -> None:
        pass


def _rescues(phase=Phase.STOPPED, refuse=False, listings=()):
    source = SimpleNamespace(life=SimpleNamespace(phase=phase))
    fleet = SimpleNamespace(get=lambda iid: source if iid == SRC else None)
    link = FakeLink(list(listings))
    market, journal = FakeMarket(refuse), FakeJournal()
    return Rescues(market, fleet, link, journal), market, link, journal  # type: ignore[arg-type]


def _go(coro):
    return asyncio.run(coro)


HOST = SimpleNamespace(instance_id=DST)


def test_asked_only_for_work_worth_the_wait_off_a_rental_that_keeps_its_disk():
    for lost, phase, want in (
        (600.0, Phase.STOPPED, True),
        (60.0, Phase.STOPPED, False),  # a minute of work: not worth the next host's wait
        (None, Phase.STOPPED, False),
        (600.0, Phase.DESTROYED, False),  # its disk went with it
    ):
        r, market, _, journal = _rescues(phase)
        job = JobState(JOB)
        r.outbid(job, SRC, lost)
        assert _go(r.begin(HOST, job, 100.0)) is want
        assert bool(market.asked) is want
        if want:
            [(src, src_path, dst, dst_path)] = market.asked
            assert (src, src_path, dst) == (SRC, "/root/ckpt/", DST)
            assert dst_path == "/root/.rentwatch/jobs/fit/rescue/"
            assert journal.facts[-1]["detail"]["stage"] == "asked" and r.waiting(job)
    r, market, _, _ = _rescues()
    job = JobState(JOB)
    r.outbid(job, DST, 600.0)  # the same rental again: its disk is right there
    assert not _go(r.begin(HOST, job, 100.0)) and not market.asked


def test_a_refused_copy_starts_the_job_from_what_was_pulled():
    r, _, _, journal = _rescues(refuse=True)
    job = JobState(JOB)
    r.outbid(job, SRC, 600.0)
    assert not _go(r.begin(HOST, job, 100.0)) and not r.waiting(job)
    assert journal.facts[-1]["ok"] is False and "No such user" in journal.facts[-1]["reason"]


def test_it_waits_while_the_folder_grows_or_a_look_fails_and_lands_once_settled():
    grown = [b"", b"a 10\n", SSHFailure("dropped"), b"a 20\n", b"a 20\n"]
    r, _, link, journal = _rescues(listings=grown)
    job = JobState(JOB)
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 0.0))
    t = 0.0
    for _ in range(4):  # empty, growing, no answer, changed again: not yet
        t += RESCUE_SETTLE_S + 1
        assert not _go(r.step(HOST, job, t))
    t += RESCUE_SETTLE_S + 1
    assert _go(r.step(HOST, job, t)) and not r.waiting(job)
    assert journal.facts[-1]["detail"]["stage"] == "landed" and journal.facts[-1]["ok"]
    assert any("cp -a" in c and '"$HOME"/ckpt/' in c for c in link.sent)


def test_a_copy_that_never_lands_is_given_up_at_its_deadline():
    r, _, link, journal = _rescues(listings=[b""] * 100)
    job = JobState(JOB)
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 0.0))
    assert not _go(r.step(HOST, job, RESCUE_WAIT_S - 1))
    assert _go(r.step(HOST, job, RESCUE_WAIT_S + 1))
    assert journal.facts[-1]["detail"]["stage"] == "lost" and journal.facts[-1]["ok"] is False
    assert not any("cp -a" in c for c in link.sent)


def test_a_job_requeued_while_it_waits_waits_no_more_and_its_next_host_asks_again():
    r, market, _, _ = _rescues()
    job = JobState(JOB)
    r.outbid(job, SRC, 600.0)
    assert _go(r.begin(HOST, job, 0.0)) and r.waiting(job)
    r.forget(job)  # its host went down while the copy was coming
    assert not r.waiting(job)
    other = SimpleNamespace(instance_id=33)
    assert _go(r.begin(other, job, 50.0)) and r.waiting(job)
    assert [a[2] for a in market.asked] == [DST, 33]
