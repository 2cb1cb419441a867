"""A running job moves off a dear host onto a free proven host that does its work for much less
(core/worth/swap.py `moves_off`, engine/jobs/swap_watch.py): its host is stopped, never
destroyed, the job goes on from its last checkpoint at no retry and no blame on the host, and
only where the saving outweighs the work done again and a restart."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from rentwatch.core.campaign import Job
from rentwatch.core.decisions import AttemptView, FleetSnapshot, Stop
from rentwatch.core.delivery import Delivery, WorkOutlook, outlook
from rentwatch.core.jobs import JobQueue, JobState
from rentwatch.core.lifecycle import Lifecycle, Phase
from rentwatch.core.policy import DEFAULT
from rentwatch.core.preflight.verdict import Verdict
from rentwatch.core.rules import decide
from rentwatch.core.worth.swap import MOVE_RULE, Busy, Free, moves_off
from rentwatch.engine.attempt import Attempt
from rentwatch.engine.fleet import Fleet
from rentwatch.engine.jobs.swap_watch import SwapWatch
from rentwatch.engine.jobs.work import JobWork

from tests.test_rescue_unit import FakeJournal
from tests.test_swap import _view as proven_view

REF = "RTX 4090"


def test_a_job_moves_where_the_work_left_costs_far_less_on_a_free_host():
    # a 3060 on-demand at $2.40 per ref-h with 0.25 ref-h left; an A100 free at $0.32
    dear = Busy(1, 2.40, 0.25, 0.02)
    a100 = Free(2, 0.32, 0.50)
    assert set(moves_off([dear], [a100])) == {1}
    assert "free i:2" in moves_off([dear], [a100])[1]
    assert moves_off([dear], []) == {}  # nowhere to go
    assert moves_off([replace(dear, usd_per_ref_h=0.40)], [a100]) == {}  # not dear enough
    assert moves_off([replace(dear, lost_ref_h=2.0)], [a100]) == {}  # too much done again
    assert moves_off([replace(dear, left_ref_h=0.01)], [a100]) == {}  # too little to save
    # two dear jobs, one free host: the larger saving moves, the other stays
    bigger = Busy(3, 2.40, 0.50, 0.02)
    assert set(moves_off([dear, bigger], [a100])) == {3}
    assert set(moves_off([dear, bigger], [a100, Free(4, 0.32, 0.50)])) == {1, 3}


def _view(**kw: object) -> AttemptView:
    return proven_view(**{"busy": True, **kw})


def test_the_rules_stop_the_host_a_job_moves_off_never_destroy_it():
    snap = FleetSnapshot(
        fleet=2,
        max_creates=10,
        creates=2,
        budget_usd=50.0,
        spent_usd=1.0,
        attempts=(_view(), _view(instance_id=8, machine_id=80, busy=False)),
        jobs_running=1,
        jobs_total=3,
        moving={7: "its job's work left costs less on free i:8"},
    )
    out = decide(snap, DEFAULT, 1000.0)
    assert [(type(d), d.instance_id, d.rule) for d in out] == [(Stop, 7, MOVE_RULE)]  # type: ignore[union-attr]
    assert out[0].failure_class is None  # type: ignore[union-attr]  # no quarantine: it delivers
    done = replace(snap, attempts=(_view(busy=False), snap.attempts[1]))
    assert not any(isinstance(d, Stop) for d in decide(done, DEFAULT, 1000.0))  # its job ended


def _host(iid: int, dph: float, tflops: float, gpu: str = REF) -> Attempt:
    a = Attempt(iid, None, iid * 10, 1, gpu, 0.0, dph, 0.0, Lifecycle(Phase.VERIFIED, proven=True))
    a.verdict = Verdict(True, None, "ok", tflops=tflops, expected=tflops)
    return a


class _Book:
    policy = DEFAULT

    def work_outlook(self, jobs: list[Job], hosts: int) -> WorkOutlook | None:
        return outlook(jobs, {}, hosts)


def _watch(pulled_at: float | None) -> tuple[SwapWatch, JobQueue]:
    fleet = Fleet(2)
    # a 3060 (22 TFLOP/s) at $0.355/h on a job, an A100 (233) at $0.44/h free
    fleet.attempts = {1: _host(1, 0.355, 22.0, "RTX 3060"), 2: _host(2, 0.44, 233.0, "A100 SXM4")}
    queue = JobQueue((Job("fit-6", "t", ref_gpu=REF, ref_hours=0.3, checkpoint="ckpt"),))
    job = queue.take(1, 0.0)
    assert job is not None
    job.delivery = Delivery(None, 22.0, 22.0, None, "preflight", 0.05)
    return SwapWatch(fleet, queue, lambda j: pulled_at), queue


def test_the_watch_moves_a_running_job_off_a_dear_slow_host_to_a_free_fast_one():
    watch, queue = _watch(pulled_at=1100.0)
    watch.look(1200.0, _Book(), False)  # type: ignore[arg-type]
    assert set(watch.moving()) == {1}
    job = queue.on(1)
    assert job is not None
    job.status = "done"  # the job ended meanwhile: nothing to move
    assert watch.moving() == {}


def test_the_watch_prices_the_work_since_the_last_checkpoint_as_done_again():
    # no checkpoint came off in the 20 minutes since it started: all of that is done again
    watch, _ = _watch(pulled_at=None)
    watch.look(1200.0, _Book(), False)  # type: ignore[arg-type]
    lost_all = watch.moves
    watch, _ = _watch(pulled_at=1190.0)
    watch.look(1200.0, _Book(), False)  # type: ignore[arg-type]
    assert lost_all and watch.moves
    assert lost_all[1][1] != watch.moves[1][1]
    assert "0.05 ref-h since its checkpoint" in lost_all[1][1]


def test_nothing_moves_while_work_is_queued_for_the_free_host():
    watch, queue = _watch(pulled_at=1100.0)
    queue.jobs += (JobState(Job("fit-7", "t", ref_gpu=REF, ref_hours=0.3)),)
    watch.look(1200.0, _Book(), False)  # type: ignore[arg-type]
    assert watch.moves == {}


def test_a_moved_job_is_queued_again_at_no_retry_and_no_blame_on_its_host(tmp_path):
    host = _host(11, 0.355, 22.0, "RTX 3060")
    journal = FakeJournal()
    journal.campaign = "c"  # type: ignore[attr-defined]
    queue = JobQueue((Job("fit", "train", ref_gpu=REF, ref_hours=0.3, retries=0),))
    work = JobWork(
        queue, SimpleNamespace(get={11: host}.get), SimpleNamespace(), journal,  # type: ignore[arg-type]
        SimpleNamespace(now=lambda: 500.0), artifacts_root=tmp_path,  # type: ignore[arg-type]
    )  # fmt: skip
    job = queue.take(11, 100.0)
    assert job is not None
    host.life = replace(host.life, phase=Phase.STOPPED)
    host.stopped_by_us, host.stop_rule = True, MOVE_RULE
    work.reap(500.0)
    assert job.status == "pending", "a move of ours cost the job a retry it did not have"
    (fact,) = [f for f in journal.facts if f["kind"] == "job_finished"]
    assert fact["detail"]["host_fault"] is False and "moved" in fact["reason"]
