"""A job's progress reaches the pane within one poll of its progress file changing: the job's
status command (engine/jobs/runner.py) runs for real in a local shell standing in for the host,
reads the file, the job's look (JobWork.check, one per job poll) turns it into the delivery, the
fleet snapshot carries it, and the dashboard's SVG shows the bar, the share and an ETA."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

from rentwatch.core.campaign import Job
from rentwatch.engine.hosts.ssh import RunResult, SSHRunner
from rentwatch.views.snapshot import snapshot
from rentwatch.widgets.app import RentwatchApp
from rentwatch.widgets.messages import FleetSnapshot
from rentwatch.widgets.render import progress_bar

from .ledgers import new_ledger
from .test_snapshots import SIZE, StillEngine, _text
from .test_supervisor_unit import key, run, verified  # noqa: F401


def _local_runner(home: Path) -> type[SSHRunner]:
    class LocalShell(SSHRunner):
        """The host is a shell on this machine, its home `home`: commands run for real."""

        async def run(
            self, instance_id: int, host: str, port: int, command: str, **kw: Any
        ) -> RunResult:
            proc = await asyncio.create_subprocess_shell(
                command,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "HOME": str(home)},
            )
            out, err = await proc.communicate()
            return RunResult(proc.returncode, out, err, False)

    return LocalShell


async def _pane_text(fleet: Any) -> str:
    app = RentwatchApp(StillEngine(), new_ledger(), refresh_s=0.05)  # type: ignore[arg-type]
    async with app.run_test(size=SIZE) as pilot:
        app.post_message(FleetSnapshot(fleet))
        await pilot.pause(0.3)
        for _ in range(50):
            if "work ▕" in (text := _text(app.export_screenshot())) and "palette" in text:
                break
            await pilot.pause(0.1)
        return text


def _work_line(share: float) -> str:
    return "work ▕" + progress_bar(share) + f"▏  {share:.0%}"


def test_the_pane_shows_a_new_progress_reading_after_one_poll(key, tmp_path):  # noqa: F811
    home = tmp_path / "home"
    job = Job("fit-1", "sleep 120", ref_gpu="RTX 4090", ref_hours=2.0)
    shots: dict[str, str] = {}

    async def body(sup, market, ledger):
        iid = await verified(sup, market)  # proven: the dispatch launched the job on it
        a, state = sup.attempts[iid], sup.jobs.on(iid)
        assert state is not None and state.job == job and state.status == "running"
        folder = home / ".rentwatch" / "jobs" / job.name
        try:
            progress = folder / "progress"  # $RENTWATCH_PROGRESS, as the job would write it
            progress.write_text("0.25\n")
            market.t += 600
            await sup.job_work.check(a, state)  # one look at the job: the poll's
            shots["first"] = await _pane_text(snapshot(sup, market.t))
            progress.write_text("0.60\n")  # the job writes again
            market.t += 840
            shots["before"] = await _pane_text(snapshot(sup, market.t))
            await sup.job_work.check(a, state)  # the next poll
            shots["after"] = await _pane_text(snapshot(sup, market.t))
        finally:
            os.killpg(int((folder / "pid").read_text()), signal.SIGTERM)  # its session

    run(key, body, runner=_local_runner(home), jobs=(job,), fleet=1)
    assert _work_line(0.25) in shots["first"] and "ETA 30m00s" in shots["first"]
    # until the poll looks, the pane shows what the last look read
    assert _work_line(0.25) in shots["before"] and _work_line(0.60) not in shots["before"]
    # after it: 60% in 24 market minutes, so 16 left
    assert _work_line(0.60) in shots["after"] and "ETA 16m00s" in shots["after"]


def test_a_job_resumed_from_another_hosts_checkpoint_does_not_credit_this_host_with_its_speed():
    """A sized job that came with most of its work done elsewhere ends in minutes: its size
    over this host's time would be many times what the host computes. The ledger then keeps
    the host's measured speed (its preflight's), not that (training family 1: a 4090 that
    finished a resumed job in 209 s was remembered at 13.7x its model's speed)."""
    from rentwatch.core.campaign import Job
    from rentwatch.core.jobs import JobState
    from rentwatch.core.preflight.gpu_specs import expected_tflops
    from rentwatch.core.preflight.verdict import Verdict
    from rentwatch.engine.attempt import Attempt
    from rentwatch.engine.jobs.delivered import work_detail

    model = expected_tflops("RTX 4090") or 1.0
    a = Attempt(5, None, 70, 7, "RTX 4090", 0.0, 0.3, 0.01)
    a.verdict = Verdict(True, None, "ok", tflops=model * 0.97, expected=model)
    job = JobState(Job("fit", "true", ref_gpu="RTX 4090", ref_hours=0.8))
    whole = work_detail(a, job, duration=0.8 * 3600 / 0.95, ok=True)  # ran from zero here
    assert whole["speed_source"] == "size" and whole["speed_share"] == 0.95
    resumed = work_detail(a, job, duration=209.0, ok=True)
    assert resumed["speed_source"] == "preflight" and resumed["speed_share"] == 0.97
    assert resumed["work_ref_h"] == 0.8
