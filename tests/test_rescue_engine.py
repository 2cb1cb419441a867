"""The rescue wired into the engine's job and tier code, against fakes (found by an outside
review): an outbid while a job waits for its state's copy, a checkpoint pull that failed, a
restart, and a copy's ask whose answer was lost."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from rentwatch.core.campaign import Job
from rentwatch.core.jobs import JobQueue
from rentwatch.core.lifecycle import Lifecycle, Phase
from rentwatch.engine.jobs.rescue import Rescues, unanswered
from rentwatch.engine.jobs.work import JobWork
from rentwatch.engine.tier import TierWatch
from rentwatch.market.errors import AnswerLost, ApiError

from .test_rescue_unit import FakeJournal, FakeLink, FakeMarket

SIZED = dict(ref_gpu="RTX 4090", ref_hours=1.0, retries=2)
A, B, C = 11, 22, 33


def _go(coro):
    return asyncio.run(coro)


class Fleet:
    def __init__(self, phases: dict[int, Phase]):
        self.attempts = {
            i: SimpleNamespace(life=Lifecycle(phase=p), instance_id=i, offer=None, status="stopped")
            for i, p in phases.items()
        }

    def get(self, iid):
        return self.attempts.get(iid)


def _bid_host(iid: int) -> Any:
    return SimpleNamespace(
        instance_id=iid,
        bid=0.2,
        machine_id=iid * 10,
        gpu_name="RTX 4090",
        passed_preflight=True,
        outbid=lambda now, mb: None,
        life=Lifecycle(Phase.STOPPED),
    )


def _world(job: Job):
    fleet = Fleet({A: Phase.STOPPED, B: Phase.STOPPED, C: Phase.VERIFIED})
    journal, link, market = FakeJournal(), FakeLink(), FakeMarket()
    clock = SimpleNamespace(now=lambda: 0.0)
    work = JobWork(JobQueue((job,)), fleet, link, journal, clock, market=market)  # type: ignore
    tier = TierWatch(
        SimpleNamespace(now=lambda: 0.0),  # type: ignore
        journal,  # type: ignore
        fleet,  # type: ignore
        work,
        None,  # type: ignore
        SimpleNamespace(rental="interruptible", max_bid_dph=None),  # type: ignore
        "default",
    )
    return work, tier, market, journal


def test_an_outbid_while_a_job_waits_for_its_copy_keeps_where_its_state_is():
    """Job runs on A (bid), outbid after 15 min with no pull: its state waits on paused A.
    It goes to B (also a bid rental) and waits there for the copy off A. B is outbid too
    before the copy lands. A still holds the state: C asks for it again."""
    job = Job(name="fit", run="train", checkpoint="ckpt", **SIZED)
    work, tier, market, journal = _world(job)
    js = work.queue.take(A, 100.0)
    js.seen_running_at = 800.0  # seen running on A
    tier.outbid(_bid_host(A), SimpleNamespace(bid_floor=0.3), 900.0)
    js = work.queue.take(B, 1000.0)
    assert _go(work.rescues.begin(SimpleNamespace(instance_id=B), js, 1000.0))  # asked off A
    tier.outbid(_bid_host(B), SimpleNamespace(bid_floor=0.3), 1300.0)  # B outbid mid-wait
    js = work.queue.take(C, 1400.0)
    asked_again = _go(work.rescues.begin(SimpleNamespace(instance_id=C), js, 1400.0))
    assert asked_again and market.asked[-1][0] == A  # the state on paused A, asked again


def test_an_outbid_while_a_job_waits_for_its_copy_costs_no_work():
    job = Job(name="fit", run="train", checkpoint="ckpt", **SIZED)
    work, tier, market, journal = _world(job)
    js = work.queue.take(A, 100.0)
    js.seen_running_at = 800.0
    tier.outbid(_bid_host(A), SimpleNamespace(bid_floor=0.3), 900.0)
    js = work.queue.take(B, 1000.0)
    assert _go(work.rescues.begin(SimpleNamespace(instance_id=B), js, 1000.0))
    tier.outbid(_bid_host(B), SimpleNamespace(bid_floor=0.3), 1300.0)
    lost = [f["detail"]["work_lost_s"] for f in journal.facts if f["kind"] == "outbid"]
    assert lost[-1] == 0.0  # the job never ran on B: its wait there is no work lost


def test_a_failed_checkpoint_pull_is_not_a_pull():
    """A checkpoint pull that fails (SFTP error) 14 min in is no pull: an outbid at 16 min has
    lost all 16 (not 2, under the rescue's threshold), and its state is worth a copy."""
    job = Job(name="fit", run="train", checkpoint="ckpt", checkpoint_every_s=600.0, **SIZED)
    work, tier, market, journal = _world(job)
    t = {"now": 100.0}
    work.clock = SimpleNamespace(now=lambda: t["now"])  # type: ignore

    class Link:
        async def run(self, a, command, stdin=None, timeout=60):
            return SimpleNamespace(stdout=b"RUNNING\n", exit_status=0)

        async def on_connection(self, a, fn):
            raise OSError("sftp: connection reset")

    work.link = work.pulls.link = Link()  # type: ignore  # the pulls go over the same one
    journal.campaign = "c"  # type: ignore
    js = work.queue.take(A, 100.0)
    js.seen_running_at = 100.0
    t["now"] = 100.0 + 14 * 60
    _go(
        work.check(
            SimpleNamespace(
                instance_id=A,
                job_said=lambda s: None,
                verdict=None,
                slowdown=0.0,
                gpu_name="RTX 4090",
                bid=None,
                life=Lifecycle(Phase.VERIFIED),
            ),
            js,
        )
    )
    tier.outbid(_bid_host(A), SimpleNamespace(bid_floor=0.3), 100.0 + 16 * 60)
    lost = [f["detail"]["work_lost_s"] for f in journal.facts if f["kind"] == "outbid"]
    assert lost[-1] == 16 * 60  # since the job began: the one pull tried failed
    [ev] = [f for f in journal.facts if f["kind"] == "outbid"]
    assert "since it started (no checkpoint came off yet)" in ev["reason"]
    # the outbid event holds the work it cost; the requeue does not count it again
    [requeue] = [f for f in journal.facts if f["kind"] == "job_finished"]
    assert "from the start" in requeue["reason"]
    assert "work_lost_ref_h" not in requeue["detail"]


def test_a_restart_remembers_the_last_host_and_keeps_the_state_on_its_disk(tmp_path):
    """Before a restart the job ran on A; after it, A resumes and the job goes back on A. The
    state on A's disk is newer than the pulled copy, and the restart knows A was the last
    host (from the ledger's job_started), so the pulled copy is not pushed over it."""
    job = Job(name="fit", run="train", checkpoint="ckpt", **SIZED)
    work, _, _, journal = _world(job)
    ev = SimpleNamespace(
        kind="job_started", instance_id=A, at=0.0, detail={"job": "fit", "attempt": 1}
    )
    fin = SimpleNamespace(
        kind="job_finished",
        instance_id=A,
        at=900.0,
        detail={"job": "fit", "requeued": True, "host_loss": True},
    )
    from rentwatch.ledger import EventKind as K

    def events(campaign, *kinds):
        want = {str(k) for k in kinds}
        return [e for e in (ev, fin) if e.kind in want]

    journal.campaign = "c"
    work.journal = journal  # type: ignore
    work.restore(SimpleNamespace(campaign_events=events))  # type: ignore
    assert K.JOB_STARTED == "job_started"
    src = tmp_path / "ckpt_root"
    (src / "ckpt").mkdir(parents=True)
    (src / "ckpt" / "step").write_text("100")
    pushed: list[str] = []

    async def on_connection(a, fn):
        pushed.append("push")
        return ["ckpt/step"]

    work.link.on_connection = on_connection  # type: ignore
    js = work.queue.take(A, 2000.0)
    _go(work.rescues.push_pulled(SimpleNamespace(instance_id=A), js, src, 2000.0))
    assert not pushed  # the state on A's disk is newer than the pulled copy: kept


def test_a_copy_whose_answer_was_lost_is_not_asked_again_and_a_429_is():
    """copy_direct is not idempotent (each PUT starts an rsync that bills bandwidth on both
    machines): a 502 after the market acted is raised after one PUT, for the rescue to look
    for the copy all the same; a 429 (not acted on) is asked again."""
    import httpx
    from rentwatch.market.vast.client import VastClient

    seen: list[str] = []
    answers: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        status = answers.pop(0)
        if status == 0:
            raise httpx.ReadError("connection reset", request=request)
        if status != 200:
            return httpx.Response(status, json={"msg": "no"})
        return httpx.Response(200, json={"success": True, "msg": "Remote to Remote copy initiated"})

    async def go():
        async with VastClient(
            "http://m", "k", min_intervals={}, backoff=0.0, transport=httpx.MockTransport(handler)
        ) as c:
            await c.copy_between(1, "/root/ckpt", 2, "/root/x/")

    answers[:] = [502]
    with pytest.raises(ApiError) as err:
        asyncio.run(go())
    assert err.value.status == 502 and len(seen) == 1 and unanswered(err.value)
    seen.clear()
    answers[:] = [429, 200]
    asyncio.run(go())
    assert len(seen) == 2
    seen.clear()
    answers[:] = [0]  # the connection drops: no answer at all
    with pytest.raises(AnswerLost):
        asyncio.run(go())
    assert len(seen) == 1


def test_a_copy_whose_answer_was_lost_is_looked_for_all_the_same():
    class Lost(FakeMarket):
        async def copy_between(self, *args) -> None:
            self.asked.append(args)
            raise AnswerLost("PUT /api/v0/commands/copy_direct/ timed out after 30s")

    source = SimpleNamespace(life=Lifecycle(phase=Phase.STOPPED), offer=None, status="stopped")
    fleet = SimpleNamespace(get=lambda iid: source if iid == A else None)
    market, journal = Lost(), FakeJournal()
    r = Rescues(market, fleet, FakeLink(), journal)  # type: ignore[arg-type]
    js = JobQueue((Job(name="fit", run="train", checkpoint="ckpt", **SIZED),)).take(B, 0.0)
    r.outbid(js, A, 600.0)
    assert _go(r.begin(SimpleNamespace(instance_id=B), js, 0.0)) and r.waiting(js)
    assert len(market.asked) == 1
    fact = journal.facts[-1]
    assert fact["detail"]["stage"] == "asked" and fact["detail"]["answer_lost"]
    assert "not asked again" in fact["reason"]


def test_a_checkpoint_no_pull_of_this_ledger_put_there_is_not_pushed(tmp_path):
    """The checkpoint folder is the campaign name's, whichever ledger ran it: a campaign of the
    same name on another ledger left its state there, and a retry here would have resumed from
    it. Once this ledger records a pull of the job's checkpoint, the retry starts from it."""
    job = Job(name="fit", run="train", checkpoint="ckpt", **SIZED)
    work, _, _, journal = _world(job)
    journal.campaign = "c"  # type: ignore
    src = tmp_path / "checkpoint"
    (src / "ckpt").mkdir(parents=True)
    (src / "ckpt" / "step").write_text("100")
    pushed: list[int] = []

    async def on_connection(a, fn):
        pushed.append(a.instance_id)
        return ["ckpt/step"]

    work.link.on_connection = on_connection  # type: ignore
    js = work.queue.take(B, 2000.0)
    _go(work.rescues.push_pulled(SimpleNamespace(instance_id=B), js, src, 2000.0))
    assert pushed == []
    pull = SimpleNamespace(
        kind="artifacts", instance_id=A, at=1500.0, ok=True,
        detail={"job": "fit", "kind": "checkpoint", "files": [{"path": "ckpt/step"}]},
    )  # fmt: skip

    def events(campaign, *kinds):
        return [pull] if "artifacts" in {str(k) for k in kinds} else []

    work.restore(SimpleNamespace(campaign_events=events))  # type: ignore
    _go(work.rescues.push_pulled(SimpleNamespace(instance_id=B), js, src, 2000.0))
    assert pushed == [B]
