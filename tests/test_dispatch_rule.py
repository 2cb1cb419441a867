"""The dispatch rule (core/jobs): which proven hosts get the next jobs, and in what order."""

from __future__ import annotations

from rentwatch.core.jobs import Dispatch, Slot, dispatches


def slot(iid: int, speed: float = 10.0, **kw: bool) -> Slot:
    return Slot(
        iid, speed, kw.get("busy", False), kw.get("swap_due", False), kw.get("routed", True)
    )


def ids(ds: list[Dispatch]) -> list[int]:
    return [d.instance_id for d in ds]


def test_free_routed_hosts_get_jobs_in_fleet_order():
    slots = [slot(1), slot(2, busy=True), slot(3, swap_due=True), slot(4, routed=False), slot(5)]
    got = dispatches(slots, pending=3, by_work=False, fault=False)
    assert ids(got) == [1, 5] and all(d.rule == "rule:dispatch" for d in got)


def test_buying_by_work_sends_the_fastest_host_first_and_keeps_ties_in_order():
    slots = [slot(1, 5.0), slot(2, 40.0), slot(3, 20.0), slot(4, 20.0)]
    assert ids(dispatches(slots, 4, by_work=True, fault=False)) == [2, 3, 4, 1]
    assert ids(dispatches(slots, 4, by_work=False, fault=False)) == [1, 2, 3, 4]


def test_no_job_goes_out_under_a_campaign_fault_or_with_nothing_pending():
    slots = [slot(1), slot(2)]
    assert dispatches(slots, 2, by_work=False, fault=True) == []
    assert dispatches(slots, 0, by_work=False, fault=False) == []


def test_a_host_whose_last_job_is_finishing_gets_no_next_one():
    """A job exited and its artifacts are coming off the host's folder: the next job there
    would write over them. The example campaign pulled lora-r32's out/result.json as
    lora-r8's (both wrote out/result.json in one workdir; the host looked free)."""
    from rentwatch.core.campaign import Job
    from rentwatch.core.jobs import JobQueue

    queue = JobQueue((Job("a", "true"), Job("b", "true")))
    first = queue.take(7, 1.0)
    assert first is not None
    first.status = "finishing"  # exited; its pull under way
    assert queue.take(7, 2.0) is None, "a second job on a host still pulling the first"
    queue.finished(first, 0, 3.0)
    assert queue.take(7, 4.0) is not None
