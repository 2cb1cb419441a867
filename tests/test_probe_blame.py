"""Blame needs proof at the probe stage too (issue 30, item 3): one host whose shell says
`python3: command not found` after another host's preflight with the same image computed is
that host's failure, never a campaign fault; one host alone is a suspicion that spares it; two
machines with no verified preflight make the fault. The tender, the blame book, the journal and
the ledger are the real ones; a scripted link stands in for SSH."""

from __future__ import annotations

import asyncio
import json

from rentwatch.core.policy import DEFAULT
from rentwatch.engine.attempt import Attempt
from rentwatch.engine.blame_book import BlameBook
from rentwatch.engine.hosts.ssh import RunResult
from rentwatch.engine.hosts.tender import HostTender

from tests.fake_market import campaign
from tests.test_empty_answers import ScriptedLink, attempt, job_work, said

NO_PYTHON = RunResult(127, b"", b"bash: line 1: python3: command not found\n", False)
OK = json.dumps(
    {
        "probe": "preflight",
        "schema": 1,
        "ok": True,
        "device": {"name": "NVIDIA GeForce RTX 4090"},
        "matmul": {"result_ok": True, "tflops": 150.0},
    }
)


def setup():
    link = ScriptedLink([said("")])
    work, _, ledger = job_work(link)
    c = campaign(image="nvidia/cuda:12.4.1-runtime-ubuntu22.04")
    book = BlameBook(work.journal, c)
    tender = HostTender(link, work, work.journal, DEFAULT, work.clock, c, book)  # type: ignore[arg-type]
    return link, tender, book, ledger


def preflight(tender: HostTender, link: ScriptedLink, answer: RunResult, iid: int) -> Attempt:
    link.answers = iter([answer])
    a = attempt(iid)
    a.machine_id = 100 + iid
    asyncio.run(asyncio.wait_for(tender._preflight(a), 5))
    return a


def faults(ledger) -> list:
    return [e for e in ledger.events() if e.kind == "campaign_fault"]


def test_one_host_without_python3_after_another_verified_is_no_campaign_fault():
    link, tender, book, ledger = setup()
    first = preflight(tender, link, said(OK + "\n"), 1)
    assert first.verdict is not None and first.verdict.ok
    second = preflight(tender, link, NO_PYTHON, 2)
    assert book.fault is None and faults(ledger) == []
    # the host's own failure: judged like any host that cannot run the probe (quarantined)
    assert second.verdict is not None and second.verdict.failure_class == "bad_probe"
    assert second.instance_id not in book.spared
    third = preflight(tender, link, NO_PYTHON, 3)  # a second such host: still proof against
    assert book.fault is None and third.verdict.failure_class == "bad_probe"  # type: ignore[union-attr]


def test_one_host_alone_is_a_suspicion_two_are_the_campaigns():
    link, tender, book, ledger = setup()
    first = preflight(tender, link, NO_PYTHON, 1)
    assert book.fault is None and faults(ledger) == []
    assert first.instance_id in book.spared  # spared: no quarantine, no reputation penalty
    assert first.verdict is not None and first.verdict.failure_class == "campaign_fault"
    preflight(tender, link, NO_PYTHON, 2)
    assert book.fault is not None and book.fault.cause == "no_python"
    (ev,) = faults(ledger)
    assert "2 machines" in ev.reason


def test_two_failures_on_one_machine_are_one_machine():
    link, tender, book, _ = setup()
    for iid in (1, 2):
        a = attempt(iid)
        a.machine_id = 77  # the same machine rented twice
        link.answers = iter([NO_PYTHON])
        asyncio.run(asyncio.wait_for(tender._preflight(a), 5))
    assert book.fault is None
