"""Silence is judged by answers, not by connects (issue 45, item 6): a proven host that
accepts SSH and then hangs every command it is sent (its watchdog dead with it) is silent. The
silent rule stops it (never destroys it: it was verified) within the silent window, and its
job is finished on another host."""

from __future__ import annotations

import asyncio
import contextlib

from rentwatch.core.policy import get_policy
from rentwatch.engine.supervisor import Supervisor
from rentwatch.ledger import Ledger

from .campaigns import run_campaign

JOB = (
    '\n[[jobs]]\nname = "work"\nrun = "python3 -c \\"import time; time.sleep(4)\\""\nretries = 3\n'
)


def test_a_host_that_connects_then_hangs_is_stopped_and_its_job_goes_elsewhere(
    make_sim, tmp_path, capsys, monkeypatch
):
    """On the stepped clock, the engine in this process: the host is hung from the engine's
    own loop once its job was seen running there, and the market's time does not depend on
    the box (a wait on the hung host holds no time: app/referee/stepped.py)."""
    sim = make_sim(
        seed=3, offers=40, stepped=True, host_class=[{"behaviour": "healthy", "share": 1}]
    )
    monkeypatch.chdir(tmp_path)  # its artifacts folder is the working directory's
    hung: list[tuple[int, float]] = []  # (the instance, the market's time it was hung)
    watching: set[asyncio.Task[None]] = set()

    def hang_once_running(sup: Supervisor) -> None:
        main = asyncio.current_task()  # the run's (this is called from inside it)
        assert main is not None

        async def watch() -> None:
            while not hung:
                job = sup.job_work.queue.by_name("work")
                if job and job.status == "running" and job.seen_running_at is not None:
                    assert job.instance_id is not None
                    sim.call(sim.ssh.hang_sessions, job.instance_id)
                    hung.append((job.instance_id, sim.call(sim.market.clock.now)))
                else:
                    await asyncio.sleep(5)  # market seconds
            # a ceiling on a hang only: where the silent host is never stopped, the campaign
            # would run on in market time; three market hours after the hang, it is ended
            while sim.call(sim.market.clock.now) < hung[0][1] + 3 * 3600:
                await asyncio.sleep(600)
            main.cancel()

        watching.add(asyncio.get_running_loop().create_task(watch()))

    code, ledger = run_campaign(
        sim, tmp_path, name="mute", fleet=1, extra=JOB, on_supervisor=hang_once_running
    )
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    [(iid, hung_at)] = hung
    assert f"on i:{iid}: no answer" in out

    led = Ledger(ledger, read_only=True)
    stops = led.events(
        where="kind = 'stop' AND phase = 'outcome' AND ok AND actor = 'rule:silent' "
        "AND instance_id = ?",
        params=[iid],
    )
    assert stops, "the silent host was never stopped by the silent rule"
    # within the silent window as the rules compute it (the policy's 10 market minutes, or 30
    # wall I/O floors where the clock runs fast: none on the stepped clock, whose scale is 1),
    # after the first command that got no answer (its deadline: under 45 market minutes)
    policy = get_policy("default")
    window = max(policy.silent_stop_s or 0, 30 * policy.io_floor_wall_s * 1)
    assert stops[0].at - hung_at <= window + 45 * 60
    assert not led.events(
        where="kind = 'destroy' AND phase = 'outcome' AND instance_id = ?", params=[iid]
    )
    [done] = led.events(where="kind = 'job_finished' AND ok")
    assert done.instance_id != iid
    truth = {r["id"]: r for r in sim.call(sim.market.truth)["instances"]}
    assert truth[iid]["stopped_at"] is not None and truth[iid]["destroyed_at"] is None


class _Runner:
    """SSHRunner's `run`, answering as a wedged host would: each in turn from `answers`
    (a RunResult, or an SSHFailure to raise)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.route_used: dict = {}
        self.connect_walls: list[float] = []

    def hold(self, subject):  # no stepped market clock to hold here
        return contextlib.nullcontext()

    async def run(self, *args, **kwargs):
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a


def test_the_link_counts_answers_not_connects_and_the_rules_see_the_silence():
    import asyncio
    from types import SimpleNamespace

    import pytest
    from rentwatch.core.decisions import FleetSnapshot, Stop
    from rentwatch.core.lifecycle import Phase
    from rentwatch.core.rules import decide
    from rentwatch.engine.attempt import Attempt
    from rentwatch.engine.hosts.link import HostLink
    from rentwatch.engine.hosts.ssh import RunResult, SSHFailure

    now = [1000.0]
    market = SimpleNamespace(time_scale=1.0, now=lambda: now[0])
    cut = RunResult(None, b"", b"", False)  # connected, then the session ended with no status
    hung = SSHFailure("'touch ~/.rentwatch/heartbeat' did not finish within 5s")
    ok = RunResult(0, b"alive\n", b"", False)
    link = HostLink(_Runner([cut, hung, hung, ok]), market, journal=_no_ledger())  # type: ignore[arg-type]
    a = Attempt(7, None, 3, 5, "RTX 4090", created_at=0.0, gpu_dph=0.2, storage_dph=0.01)
    a.ssh_host, a.ssh_port = "127.0.0.1", 22
    link.keyed.add(7)
    for to in (Phase.BOOTING, Phase.RUNNING, Phase.VERIFYING, Phase.VERIFIED):
        a.life = a.life.moved(to, 0.0, "test")
    a.life = a.life.with_proof(True)
    a.running_at = 0.0
    a.status = "running"

    async def look() -> None:
        await link.run(a, "touch ~/.rentwatch/heartbeat")

    asyncio.run(look())  # a connect that ends without an exit status is no answer
    assert a.silent_since == 1000.0
    now[0] = 1300.0
    with pytest.raises(SSHFailure):
        asyncio.run(look())
    assert a.silent_since == 1000.0  # silent since the first look that got no answer

    policy = get_policy("default")
    window = policy.silent_stop_s or 0.0

    def rules_at(t: float):
        snap = FleetSnapshot(1, 10, 1, 10.0, 0.0, (a.view(busy=True),))
        return [d for d in decide(snap, policy, t) if getattr(d, "instance_id", None) == 7]

    assert not [d for d in rules_at(1000.0 + window - 1) if isinstance(d, Stop)]
    [stop] = [d for d in rules_at(1000.0 + window) if isinstance(d, Stop)]
    assert stop.rule == "rule:silent" and stop.failure_class == "ssh_dead"
    with pytest.raises(SSHFailure):
        asyncio.run(look())
    asyncio.run(look())  # a command that ran to its end: the host answers again
    assert a.silent_since is None


def _no_ledger() -> object:
    """A journal with nothing but the rentals' writer: these looks write no ledger event."""
    from types import SimpleNamespace

    from rentwatch.engine.rentals import Writer

    return SimpleNamespace(writer=Writer(None))  # type: ignore[arg-type]
