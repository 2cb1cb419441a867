"""A host whose SSH key changes after it proved itself (an impostor, or a re-imaged box) gets
nothing more from us: the change is recorded, the instance stopped, the machine quarantined,
and its job goes elsewhere. The pin survives a controller restart."""

from __future__ import annotations

import subprocess
import time

import pytest
from rentwatch.ledger import Ledger

from .campaigns import campaign_text, headless_cmd, headless_env, run_campaign
from .conftest import market_stands

JOB = (
    '\n[[jobs]]\nname = "work"\nrun = "python3 -c \\"import time; time.sleep(3)\\""\nretries = 3\n'
)


def _read_until(proc: subprocess.Popen, word: str, timeout: float = 90, whole: bool = False) -> str:
    """The line that says `word` (`whole`: every line up to it)."""
    seen, deadline = "", time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if word in line:
            return seen if whole else line
    raise AssertionError(f"never saw {word!r}:\n{seen[-2000:]}")


@pytest.mark.parametrize("restart", [False, True], ids=["live", "after-restart"])
def test_changed_host_key_is_refused_recorded_and_stopped(make_sim, tmp_path, restart):
    sim = make_sim(seed=3, offers=40, time_scale=240)
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("keys", 1) + JOB)
    ledger = tmp_path / "l.duckdb"
    cmd = headless_cmd(sim, tmp_path, camp, ledger)
    env = headless_env(sim)
    run = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    proc = subprocess.Popen(cmd, **run)
    line = _read_until(proc, "job    work started on i:")
    iid = int(line.split("i:")[1].split()[0])
    head = ""
    if restart:
        # no market time passes until the new controller has adopted the instance: on a loaded
        # box a slow restart let the host's watchdog (armed for the killed controller) stop it
        # first, and a stopped host is never reached, so its changed key was never seen
        with market_stands(sim):
            proc.kill()  # no trap: the instance stays up, and the new controller must hold the pin
            proc.wait()
            sim.call(sim.ssh.replace_host_key, iid)
            proc = subprocess.Popen(cmd, **run)
            head = _read_until(proc, "adopt", timeout=300, whole=True)
    else:
        sim.call(sim.ssh.replace_host_key, iid)
    out, _ = proc.communicate(timeout=300)
    out = head + out
    assert proc.returncode == 0, out[-3000:]
    assert f"distrust i:{iid}" in out

    led = Ledger(ledger)
    [changed] = led.events(where="kind = 'host_key_changed' AND instance_id = ?", params=[iid])
    assert "host key changed" in changed.reason
    stops = led.events(
        where="kind = 'stop' AND phase = 'outcome' AND ok AND actor = 'rule:host_key' "
        "AND instance_id = ?",
        params=[iid],
    )
    assert stops, "the instance was not stopped"
    [q] = led.events(where="kind = 'quarantine' AND instance_id = ?", params=[iid])
    assert q.detail["class"] == "host_key_changed"
    # no automated destroy of it (it passed its preflight), and the job finished on another host
    assert not led.events(
        where="kind = 'destroy' AND phase = 'outcome' AND instance_id = ?", params=[iid]
    )
    [done] = led.events(where="kind = 'job_finished' AND ok")
    assert done.instance_id != iid
    truth = {r["id"]: r for r in sim.call(sim.market.truth)["instances"]}
    assert truth[iid]["stopped_at"] is not None


def test_throttling_host_is_stopped_when_the_policy_says_so(make_sim, tmp_path):
    """`stop_on_throttle`: a host whose clocks sag under load with a throttle reason is
    stopped (never destroyed: it passed its preflight) and its job moves on."""
    sim = make_sim(
        seed=5,
        offers=30,
        stepped=True,  # the engine in process on the market's clock: a loaded box is no lag
        host_class=[
            {"behaviour": "throttled", "share": 1.0, "throttle_after_min": [0.5, 1.0]},
        ],
    )
    job = '\n[[jobs]]\nname = "hot"\nrun = "python3 -c \\"import time; time.sleep(8)\\""\nretries = 0\n'
    # two creates: every host throttles, and a lost host is not charged to the job's retries
    code, ledger = run_campaign(
        sim, tmp_path, "default", fleet=1, extra="[policy]\nstop_on_throttle = true\n" + job,
        max_creates=2,
    )  # fmt: skip
    led = Ledger(ledger)
    [throttle] = led.events(where="kind = 'throttle'")[:1] or [None]
    assert throttle is not None, "no throttle was detected"
    stops = led.events(
        where="kind = 'stop' AND phase = 'outcome' AND ok AND actor = 'rule:throttle'"
    )
    assert stops and stops[0].instance_id == throttle.instance_id
    assert not led.events(
        where="kind = 'destroy' AND phase = 'outcome' AND instance_id = ?",
        params=[throttle.instance_id],
    )
    assert code != 0  # its only job was cut short and had no retries left
