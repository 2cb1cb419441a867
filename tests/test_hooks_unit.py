"""The issue 16 / 19 hooks in the supervisor, against the in-memory fake market: the market's
own stops, offline billing, unknown statuses, SSH routes and client bad rows in the ledger, a
fatal XID on a proven host, the campaign fault's banner and its resume, the check policy and the
campaign's HTTP timeout."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from rentwatch.core.decisions import Abandon, AttemptView, Create, Finish, FleetSnapshot
from rentwatch.core.errors import ConfigError
from rentwatch.core.lifecycle import Phase
from rentwatch.core.models import Instance
from rentwatch.core.policy import DEFAULT, SEED
from rentwatch.core.preflight.verdict import CheckPolicy
from rentwatch.core.rules import decide
from rentwatch.engine.session import Session
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign
from rentwatch.views.snapshot import snapshot
from rentwatch.widgets.render import campaign_bar

from .campaigns import campaign_text
from .fake_market import FakeMarket
from .test_supervisor_unit import (
    OFFERS,
    campaign,
    key,
    kinds,
    only,
    run,
    to_running,
    verified,
)

__all__ = ["key"]  # the module-scoped SSH key fixture, shared


def test_a_stop_the_market_made_is_the_markets_and_gets_a_replacement(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        market.set(iid, actual="stopped", intended="stopped")
        market.t += 10
        ds = await sup.poll_once()
        a = sup.attempts[iid]
        assert a.life.phase == Phase.STOPPED
        (stop,) = [e for e in kinds(ledger, "stop") if e.instance_id == iid]
        assert stop.actor == "market" and "market" in stop.reason
        assert ("stop_instance", iid) not in market.calls  # we never asked
        assert only(ds, Create), "the fleet is one short: the rules replace it"
        assert a.marks[-1].kind == "stop"

    run(key, body)


def test_offline_bills_nothing_and_coming_back_bills_again(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        await to_running(sup, market, iid)
        a = sup.attempts[iid]
        market.set(iid, actual="offline")
        market.t += 10
        await sup.poll_once()
        market.t += 3600  # an hour offline: neither GPU nor storage
        market.set(iid, actual="running")
        await sup.poll_once()
        assert [m.kind for m in a.marks][-3:] == ["offline", "online", "running"]
        mine = a.charges("running", market.t)  # the ledger's clock: its last event
        (row,) = [r for r in ledger.instance_rows() if r["instance_id"] == iid]
        assert row["total_usd"] == pytest.approx(mine.total_usd, abs=1e-4)
        # the hour offline is not billed: well under an hour of GPU and storage in all
        assert mine.total_usd < (a.gpu_dph + a.storage_dph) * 0.1

    # a host nobody judges yet (no preflight, no terminal rule): only the billing is watched
    lax = dataclasses.replace(
        SEED, terminal_status_abandon=False, preflight_after_s=1e6, ssh_deadline_s=1e6
    )
    run(key, body, fleet=1, policy=lax)


def _view(status: str, phase: Phase = Phase.BOOTING, **more: Any) -> AttemptView:
    return AttemptView(
        instance_id=1,
        machine_id=7,
        offer_gpu="RTX 3090",
        phase=phase,
        status=status,
        status_msg="Preparing container",
        status_since=0.0,
        created_at=0.0,
        **more,
    )


@pytest.mark.parametrize("status", ["unknown", "scheduling"])
def test_an_unknown_or_scheduling_status_is_left_to_the_deadlines(status):
    snap = FleetSnapshot(
        fleet=1, max_creates=5, creates=1, budget_usd=10, spent_usd=0, attempts=(_view(status),)
    )
    assert not only(decide(snap, SEED, 60.0), Abandon)
    if status == "scheduling":  # a long wait for its GPU is no frozen pull
        assert not only(decide(snap, DEFAULT, 20 * 60.0), Abandon)
    late = decide(snap, SEED, SEED.boot_deadline_s + 1)
    assert [d.failure_class for d in only(late, Abandon)] in (["boot_timeout"], ["freeze"])


def test_routes_are_set_each_poll_and_the_route_used_is_in_the_ledger(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        await to_running(sup, market, iid)
        assert iid in sup.ssh.routes  # set from the market's row on the poll
        from rentwatch.core.models import SSHRoute

        # as the SSH funnel notes it after a session by a route that worked (the sim
        # campaigns exercise the real path)
        sup.ssh.route_used[iid] = SSHRoute("direct", "127.0.0.2", 2222)
        sup.link._note_route(sup.attempts[iid])
        sup.link._note_route(sup.attempts[iid])  # unchanged: once
        (ev,) = kinds(ledger, "ssh_route")
        assert ev.instance_id == iid and ev.detail == {"kind": "direct", "where": "127.0.0.2:2222"}

    run(key, body)


class ClientRows(FakeMarket):
    """A market whose client, like `VastClient`, drops rows it cannot parse and says which
    (`Market.unread_rows`: how many so far, and the latest)."""

    def __init__(self) -> None:
        super().__init__(list(OFFERS))
        self.unread: tuple[int, list[tuple[int | None, str]]] = (0, [])

    async def list_instances(self) -> list[Instance]:
        self._call("list_instances")
        self.unread = (1, [(4242, "dph_total is not a number")])
        return [b.row() for b in self.boxes.values() if b.intended != "destroyed"]

    def unread_rows(self) -> tuple[int, list[tuple[int | None, str]]]:
        return self.unread


def test_rows_the_client_could_not_read_are_in_the_ledger(key):
    async def body(sup, market, ledger):
        await sup.poll_once()
        await sup.poll_once()  # the same row is not recorded twice
        (ev,) = kinds(ledger, "bad_row")
        assert ev.instance_id == 4242 and "dph_total" in ev.reason

    run(key, body, market=ClientRows())


def test_a_fatal_xid_on_a_proven_host_stops_it_and_marks_its_machine(key):
    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        a = sup.attempts[iid]
        doc = {"xid": {"supported": True, "events": [{"type": "xid", "xid": 79}]}}
        await sup.tender.check_xid(a, doc)  # what the sampler saw; the rules stop it this poll
        await sup.poll_once()
        assert a.life.phase == Phase.STOPPED
        assert kinds(ledger, "xid") and kinds(ledger, "quarantine")[0].detail["class"] == "xid"
        assert a.machine_id in sup.fleet.quarantine
        assert ("destroy_instance", iid) not in market.calls

    run(key, body, fleet=2)


def test_a_campaign_fault_stops_creates_shows_a_banner_and_ends_non_zero(key):
    from rentwatch.core.blame.fault import Stage

    async def body(sup, market, ledger):
        await sup.poll_once()
        (iid,) = sup.attempts
        a = sup.attempts[iid]
        line = "pull access denied for img, repository does not exist"
        sup.blame_book.judge(a, Stage.PULL, line)
        other = dataclasses.replace(a, instance_id=iid + 1000, machine_id=999)
        sup.blame_book.judge(other, Stage.PULL, line)
        assert sup.blame_book.fault is not None
        (ev,) = kinds(ledger, "campaign_fault")
        assert ev.ok is False and ev.detail["image"] == "img"
        snap = snapshot(sup, market.t)
        assert snap.banner and "CAMPAIGN FAULT" in snap.banner
        assert "CAMPAIGN FAULT" in campaign_bar(snap).plain
        market.set(iid, msg=line)
        market.t += 10
        ds = await sup.poll_once()
        assert not only(ds, Create)
        assert only(ds, Abandon)  # the rules' fatal line; the executor spares the host
        (ab,) = kinds(ledger, "abandon")
        assert ab.detail["class"] == "fatal" and ab.detail["blame"] == "suspect"  # first seen
        assert ab.machine_id not in {r.machine_id for r in ledger.rentals()}  # no penalty
        assert not kinds(ledger, "quarantine")
        market.t += 10
        ds = await sup.poll_once()
        (fin,) = only(ds, Finish)
        assert not fin.ok and "campaign fault" in fin.reason

    run(key, body, fleet=1)


def test_a_faulted_campaign_resumes_only_once_changed(key, tmp_path):
    from rentwatch.engine.blame_book import BlameBook, signature
    from rentwatch.engine.journal import Journal
    from rentwatch.ledger import EventKind

    ledger = Ledger(tmp_path / "l.duckdb")
    c = campaign()
    ledger.record(
        EventKind.CAMPAIGN_FAULT,
        at=1.0,
        actor="rule:blame",
        reason="the image has no python3",
        campaign="u",
        detail={"cause": "no_python", "signature": signature(c)},
    )
    clock = type("C", (), {"now": lambda self: 2.0})()
    same = BlameBook(Journal(ledger, "u", clock, lambda _: None), c)
    same.restore(ledger)
    assert same.fault is not None and "python3" in same.fault.reason
    fixed = BlameBook(
        Journal(ledger, "u", clock, lambda _: None), dataclasses.replace(c, image="img:fixed")
    )
    fixed.restore(ledger)
    assert fixed.fault is None
    ledger.close()


def test_the_check_policy_is_a_policy_setting():
    p = DEFAULT.with_overrides({"checks": {"pcie": False, "vram_min_share": 0.8}})
    assert p.checks == dataclasses.replace(CheckPolicy(), pcie=False, vram_min_share=0.8)
    assert DEFAULT.checks == CheckPolicy()
    for bad in ({"pcie": "no"}, {"nope": 1}, {"vram_min_share": -1}, "off"):
        with pytest.raises(ConfigError):
            DEFAULT.with_overrides({"checks": bad})


def test_the_campaigns_http_timeout_reaches_the_client(tmp_path):
    c = load_campaign(campaign_text(extra="http_timeout_s = 45\n"))
    assert c.http_timeout_s == 45
    with pytest.raises(ConfigError):
        load_campaign(campaign_text(extra="http_timeout_s = 0\n"))
    ledger = Ledger(tmp_path / "l.duckdb")
    s = Session.open("http://127.0.0.1:9", "k", ledger, c, SEED, key_path=tmp_path / "key")
    assert s.market.timeout == 45  # type: ignore[attr-defined]
    asyncio.run(s.market.aclose())
    ledger.close()


@pytest.mark.parametrize(
    "behaviour", ["narrow_pcie", "short_vram", "slow_disk", "slow_net", "xid_mid_job"]
)
def test_killing_a_host_with_a_new_fault_is_no_false_kill(behaviour):
    from rentwatch.referee.score import RunFacts, score

    def row(iid: int, b: str) -> dict[str, Any]:
        return {
            "id": iid,
            "behaviour": b,
            "created_at": 0.0,
            "running_at": 300.0,
            "stopped_at": None,
            "destroyed_at": 900.0,
            "total_usd": 0.01,
        }

    facts = RunFacts(start=0.0, finish=3600.0, fleet=1)
    truth = {"now": 3600.0, "instances": [row(1, behaviour)]}
    assert score(truth, facts)["false_kills"] == 0
    truth = {"now": 3600.0, "instances": [row(1, behaviour), row(2, "healthy")]}
    assert score(truth, facts)["false_kills"] == 1


def test_a_job_failing_the_same_way_on_two_machines_is_the_campaigns_fault(key):
    from rentwatch.core.campaign import Job
    from rentwatch.engine.hosts.ssh import RunResult

    tail = b"EXIT 1\nTraceback (most recent call last):\nModuleNotFoundError: No module named 'x'\n"

    async def body(sup, market, ledger):
        iid = await verified(sup, market)
        a = sup.attempts[iid]
        other = dataclasses.replace(a, instance_id=iid + 1000, machine_id=999)

        async def answer(_a: Any, _command: str, **kw: Any) -> RunResult:
            return RunResult(0, tail, b"", False)

        sup.link.run = answer  # the host's answer to the job's status command
        for host in (a, other):
            job = sup.jobs.on(host.instance_id) or sup.jobs.take(host.instance_id, market.t)
            assert job is not None
            await sup.job_work.check(host, job)
        fault = sup.blame_book.fault
        assert fault is not None and fault.cause == "repeated_job"
        assert kinds(ledger, "campaign_fault")
        assert sup.jobs.pending == 1
        await sup.job_work.dispatch(market.t)  # nothing more goes out under the fault
        assert sup.jobs.pending == 1 and not kinds(ledger, "quarantine")

    jobs = tuple(Job(name=f"j{n}", run=f"python train.py --seed {n}") for n in range(3))
    run(key, body, fleet=1, jobs=jobs)


def test_a_pull_in_doubt_waits_for_the_machine_in_flight_or_rents_one_to_decide(key):
    line = "Error response from daemon: pull access denied for img, repository does not exist"

    async def body(sup, market, ledger):
        await sup.poll_once()
        market.t += 10
        await sup.poll_once()  # fleet 2: the second create
        first, second = sorted(sup.attempts)
        market.set(first, msg=line)
        market.t += 10
        ds = await sup.poll_once()
        assert only(ds, Abandon) and sup.blame_book.pull_in_doubt
        assert len(sup.attempts) == 2, "the machine in flight decides: no create meanwhile"
        market.set(second, msg="Pulling fs layer 2")  # a fresh line: not frozen
        market.t += 10
        assert not only(await sup.poll_once(), Create)
        # the second machine is given up for its own reasons (a host fault): nothing in
        # flight any more, so one more machine is rented to decide
        market.set(second, msg="failed to inject CDI devices: unresolvable CDI devices")
        market.t += 10
        await sup.poll_once()
        market.t += 10
        assert only(await sup.poll_once(), Create) or len(sup.attempts) == 3
        assert sup.blame_book.fault is None

    run(key, body, fleet=2)
