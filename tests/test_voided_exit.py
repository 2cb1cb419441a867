"""A job that exits 0 and whose host leaves service before its output comes off did not finish:
the output went with the host, the job runs again elsewhere, and the receipt counts the run
that delivered, once (found by an outsider: the receipt said "2 jobs finished" where the
dashboard said 1, and 1 job with 1.0 reference hours done when the rerun failed and the
dashboard said 0). The engine's own rows, through a real journal into a real ledger."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from rentwatch.core.campaign import Job
from rentwatch.core.jobs import JobQueue
from rentwatch.core.lifecycle import Phase
from rentwatch.engine.attempt import Attempt
from rentwatch.engine.jobs.work import JobWork
from rentwatch.engine.journal import Journal
from rentwatch.ledger import Ledger

C = "c"
A, B = 11, 12


class Link:
    """Hosts whose job exits with `codes[iid]`; SFTP fails while `sftp_down`."""

    def __init__(self, codes: dict[int, int]) -> None:
        self.codes = codes
        self.sftp_down = True

    async def run(self, a, command, stdin=None, timeout=60):
        code = self.codes[a.instance_id]
        return SimpleNamespace(stdout=f"EXIT {code}\nend\n".encode(), exit_status=0)

    async def on_connection(self, a, fn):
        if self.sftp_down:
            raise OSError("sftp: connection reset")
        return [{"path": "out/r.txt", "bytes": 3, "sha256": "ab"}]


def _host(led: Ledger, iid: int) -> Attempt:
    s = led.intent(
        "create", at=0, actor="rule:replace", reason="fleet short", campaign=C,
        machine_id=iid + 100, offer_id=iid + 5000, gpu_dph=0.5, storage_dph=0.01,
        gpu_name="RTX 4090",
    )  # fmt: skip
    led.outcome(s, at=0, ok=True, instance_id=iid, detail={"gpu_billing": "created"})
    led.record("preflight_passed", at=60, actor="engine", reason="ok", instance_id=iid, campaign=C)
    a = Attempt(iid, None, iid + 100, 7, "RTX 4090", 0.0, 0.5, 0.01)
    for k, to in enumerate((Phase.BOOTING, Phase.RUNNING, Phase.VERIFIED)):
        a.life = a.life.moved(to, 10.0 * (k + 1), "up")
        assert a.life.phase == to
    return a


def _run(tmp_path, rerun_code: int) -> dict:
    led = Ledger(tmp_path / "l.duckdb")
    now = [1000.0]
    clock = SimpleNamespace(now=lambda: now[0])
    hosts = {A: _host(led, A), B: _host(led, B)}
    journal = Journal(led, C, clock, log=lambda s: None)  # type: ignore[arg-type]
    link = Link({A: 0, B: rerun_code})
    job_ = Job("fit", "train", artifacts=("out/",), retries=1, ref_gpu="RTX 4090", ref_hours=1.0)
    queue = JobQueue((job_,))
    fleet = SimpleNamespace(get=hosts.get)
    work = JobWork(queue, fleet, link, journal, clock, artifacts_root=tmp_path)  # type: ignore
    job = queue.take(A, 100.0)
    assert job is not None
    job.started_at = 100.0
    asyncio.run(work.check(hosts[A], job))  # exit 0; the pull fails
    assert job.status == "finishing"
    hosts[A].life = hosts[A].life.moved(Phase.STOPPED, 1100.0, "went offline")
    assert hosts[A].life.phase == Phase.STOPPED  # its output with it
    work.reap(1100.0)
    assert job.status == "pending"
    assert queue.take(B, 1200.0) is job
    job.started_at = 1200.0
    now[0] = 5000.0
    link.sftp_down = False
    asyncio.run(work.check(hosts[B], job))
    rows = led.receipt(C)
    assert len(rows) == 1
    hosts = led.query("SELECT machine_id, work_ref_h, work_lost_ref_h FROM hosts ORDER BY 1")
    return rows[0] | {"job": job, "hosts": hosts.rows}


def test_a_rerun_that_delivers_is_the_one_job_finished(tmp_path):
    r = _run(tmp_path, rerun_code=0)
    assert r["job"].status == "done"  # what the dashboard counts
    assert r["jobs_finished"] == 1
    assert r["work_done"] == 1.0
    assert r["work_lost_host"] == 1.0  # the first run's work, lost with its host
    assert r["hosts"] == [(A + 100, 0.0, 1.0), (B + 100, 1.0, 0.0)]  # and lost on that machine


def test_a_rerun_that_fails_leaves_no_job_finished_and_no_work_done(tmp_path):
    r = _run(tmp_path, rerun_code=3)
    assert r["job"].status == "failed"
    assert r["jobs_finished"] == 0
    assert r["work_done"] == 0.0
    assert r["usd_per_work_hour"] is None


def test_a_job_run_again_on_the_same_rental_after_it_resumed_counts_once(tmp_path):
    # a paused bid rental can take back the job it lost: the exit voided is the one before the
    # requeue, not the one after the job started there again
    led = Ledger(tmp_path / "l.duckdb")
    _host(led, A)

    def row(kind: str, at: float, **kw) -> None:
        led.record(
            kind,
            at=at,
            actor="engine",
            reason=kind,
            instance_id=A,
            machine_id=A + 100,
            campaign=C,
            **kw,
        )

    d = {"job": "fit", "attempt": 1}
    row("job_started", 100, detail=d)
    row("job_finished", 900, ok=True, detail=d | {"exit_code": 0, "work_ref_h": 1.0})
    row("job_finished", 1000, ok=False, detail=d | {"requeued": True, "work_lost_ref_h": 1.0})
    row("job_started", 1500, detail=d | {"attempt": 2})
    row("job_finished", 2500, ok=True, detail=d | {"exit_code": 0, "work_ref_h": 1.0})
    r = led.receipt(C)[0]
    assert (r["jobs_finished"], r["work_done"], r["work_lost_host"]) == (1, 1.0, 1.0)
    (done,) = led.query("SELECT work_ref_h FROM hosts WHERE machine_id = 111").rows[0]
    assert done == 1.0
