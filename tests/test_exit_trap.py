"""The controller cannot leak a rental by dying: signals and crashes release everything held,
and a restart after kill -9 adopts what is still there."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from rentwatch.engine.actions import Actions
from rentwatch.ledger import Ledger
from rentwatch.market.vast.client import VastClient

from .campaigns import (
    campaign_text,
    headless_cmd,
    headless_env,
    restarted,
    run_campaign,
    truth_at,
)


def _start(
    sim, tmp_path: Path, ledger: Path, crash_after: int = 0, fleet: int = 3, extra: str = ""
) -> subprocess.Popen:
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("trap", fleet, extra))
    cmd = headless_cmd(sim, tmp_path, camp, ledger, "--policy", "default")
    if crash_after:  # the same command through the fixture that injects a crash
        cmd[1:3] = [str(Path(__file__).with_name("crash_after_polls.py")), str(crash_after)]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=headless_env(sim),
    )


def _wait_for(proc: subprocess.Popen, word: str, timeout: float = 300) -> list[str]:
    lines = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if word in line:
            return lines
    raise AssertionError(f"never saw {word!r}: {''.join(lines[-20:])}")


def _stopped_by_its_watchdog(sim, iid: int, wait_s: float = 90) -> dict:
    """The instance's truth row once its stop came (the controller is gone: its watchdog's)."""
    deadline = time.time() + wait_s
    while True:
        row = next(r for r in sim.call(sim.market.truth)["instances"] if r["id"] == iid)
        if row["stopped_at"] or time.time() > deadline:
            break
        time.sleep(0.25)
    assert row["stopped_at"], "the watchdog never stopped its instance"
    return row


def _live(sim) -> list[dict]:
    t = sim.call(sim.market.truth)
    return [
        r for r in t["instances"] if r["destroyed_at"] is None and r["actual_status"] != "stopped"
    ]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_release_everything(make_sim, tmp_path, sig):
    sim = make_sim(seed=7, offers=60, time_scale=240)
    ledger = tmp_path / "l.duckdb"
    proc = _start(sim, tmp_path, ledger)
    _wait_for(proc, "verify ")
    assert _live(sim), "nothing to release"
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)  # a ceiling on a hang only
    assert proc.returncode == 128 + sig
    assert _live(sim) == [], out
    led = Ledger(ledger)
    traps = led.events(where="kind = 'trap'")
    assert traps and signal.Signals(sig).name in traps[0].reason
    assert led.events(
        where="actor = 'trap' AND kind IN ('stop', 'destroy') AND phase = 'outcome' AND ok"
    )


def test_a_second_signal_does_not_cut_the_release_short(make_sim, tmp_path):
    sim = make_sim(seed=7, offers=60, time_scale=240)
    ledger = tmp_path / "l.duckdb"
    proc = _start(sim, tmp_path, ledger)
    _wait_for(proc, "verify ")
    market = sim.market
    slow = dataclasses.replace(market.scenario.faults, rate_timeout=0.5, timeout_s=1.0)
    sim.call(lambda: setattr(market, "scenario", dataclasses.replace(market.scenario, faults=slow)))
    proc.send_signal(signal.SIGINT)
    _wait_for(proc, "releasing")  # and the market stalls half its answers: a release of seconds
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)  # the impatient operator's second Ctrl-C
    out, _ = proc.communicate(timeout=300)  # a ceiling on a hang only
    assert "SIGINT: noted; the run is ending" in out, out
    assert proc.returncode == 128 + signal.SIGINT
    assert _live(sim) == [], out


@pytest.mark.parametrize("when", ["release", "close"])
def test_a_signal_as_the_campaign_ends_cuts_nothing_short(
    make_sim, tmp_path, monkeypatch, capsys, when
):
    """A signal that lands in the campaign-end release (the short chaos run's SIGTERM, sent
    after a count of lines, sometimes did) or in the session's close after it is noted, not
    acted on: the main task is not cancelled with a stop in flight (the release would be cut
    short, a CancelledError printed, and the trap's bounded redo could leave a rental
    billing), nor in the close (the CancelledError escaped the run, the ledger unclosed)."""
    sim = make_sim(seed=5, offers=30, time_scale=300)
    sent: list[str] = []

    def signal_inside(orig, only_actor=None):
        async def hooked(self, *args):
            if not sent and (only_actor is None or only_actor in args):
                sent.append(when)
                os.kill(os.getpid(), signal.SIGTERM)
                await asyncio.sleep(0.2)  # the loop runs its signal handler meanwhile
            return await orig(self, *args)

        return hooked

    if when == "release":  # with the first stop of the campaign's own release in flight
        monkeypatch.setattr(Actions, "stop", signal_inside(Actions.stop, "rule:campaign_end"))
    else:
        monkeypatch.setattr(VastClient, "aclose", signal_inside(VastClient.aclose))
    code, ledger = run_campaign(sim, tmp_path, fleet=2, name="sig")
    out = capsys.readouterr()
    assert sent == [when]
    assert "Traceback" not in out.out + out.err and "CancelledError" not in out.out + out.err
    assert _live(sim) == []
    led = Ledger(ledger)
    ended = led.events(
        where="actor = 'rule:campaign_end' AND kind = 'stop' AND phase = 'outcome' AND ok"
    )
    # every proven rental still held was stopped by the campaign's release, once and in full:
    # the fleet's two, and a spare proven beside them where hedging rented one (on a loaded
    # box, where a host or two miss their SSH deadline, it does)
    proven = {e.instance_id for e in led.events(where="kind = 'preflight_passed' AND ok")}
    gone = {e.instance_id for e in led.events(where="kind IN ('abandon', 'destroy', 'lost')")}
    # a proven spare a rule stopped before the end (idle, no work left) is held no more
    stopped = {
        e.instance_id
        for e in led.events(
            where="kind = 'stop' AND phase = 'outcome' AND ok AND actor <> 'rule:campaign_end'"
        )
    }
    by_end = sorted(e.instance_id for e in ended)
    held = sorted(proven - gone)
    assert set(held) - stopped <= set(by_end) <= set(held) and len(by_end) >= 2, (by_end, held)
    assert len(by_end) == len(set(by_end)), by_end  # each once
    assert not led.events(where="actor = 'trap' AND kind IN ('stop', 'destroy')")
    traps = [e.reason for e in led.events(where="kind = 'trap'")]
    if when == "release":  # said: in the ledger, and by the exit code
        assert code == 128 + signal.SIGTERM
        assert traps == ["signal SIGTERM as the campaign ended: its release was not cut short"]
    else:  # everything was done when it came; the run exits as it would have
        assert code == 0 and traps == []


def test_injected_exception_releases_everything(make_sim, tmp_path):
    sim = make_sim(seed=7, offers=60, time_scale=120)
    ledger = tmp_path / "l.duckdb"
    proc = _start(sim, tmp_path, ledger, crash_after=40)
    out, _ = proc.communicate(timeout=300)  # a ceiling on a hang only
    assert proc.returncode == 1 and "injected failure" in out
    assert _live(sim) == []
    assert Ledger(ledger).events(where="kind = 'trap'")


def test_restart_after_kill_9_adopts(make_sim, tmp_path):
    sim = make_sim(seed=7, offers=60, time_scale=120)
    ledger = tmp_path / "l.duckdb"
    proc = _start(sim, tmp_path, ledger, fleet=3)
    _wait_for(proc, "verify ")
    proc.kill()
    proc.wait()
    held = {r["id"] for r in _live(sim)}
    assert held, "the killed controller held nothing"
    sim.call(sim.market.clock.advance, 120)  # two minutes of market time pass unwatched
    camp = tmp_path / "c.toml"  # the file _start wrote
    cmd = headless_cmd(sim, tmp_path, camp, ledger, "--policy", "default")
    run = restarted(sim, cmd, headless_env(sim), tmp_path)
    out = run.finish(600)  # a ceiling on a hang only; past it, what it said is the failure
    assert run.proc.returncode == 0, out[-4000:]
    assert "adopt" in out
    led = Ledger(ledger)
    adopted = {e.instance_id for e in led.events(where="kind = 'adopted'")}
    assert held <= adopted
    assert all(e.detail["unwatched_s"] > 0 for e in led.events(where="kind = 'adopted'"))
    assert _live(sim) == []
    # the create counter survived the restart: creates are not re-counted from zero
    assert led.receipt()[0]["creates"] == len(sim.call(lambda: list(sim.market.instances)))


def test_watchdog_stops_verified_hosts_after_kill_9(make_sim, tmp_path):
    """SIGKILL cannot be trapped: the host-side watchdog stops its own instance once the
    heartbeat is silent for the window (15 market minutes), with the container-scoped key."""
    sim = make_sim(seed=7, offers=60, time_scale=120)
    ledger = tmp_path / "l.duckdb"
    proc = _start(sim, tmp_path, ledger, fleet=3)
    lines = _wait_for(proc, "watchdog armed")
    iid = int(lines[-1].split("i:")[1].split()[0])
    proc.kill()
    proc.wait()
    killed_at = sim.call(sim.market.clock.now)
    row = _stopped_by_its_watchdog(sim, iid)
    silent_min = (row["stopped_at"] - killed_at) / 60
    # the window it was armed with (15 min, more where a loaded machine's I/O floor says so),
    # plus its check interval and one beat
    window_min = float(lines[-1].split("stops itself after ")[1].split()[0])
    assert window_min >= 15 and silent_min <= window_min + 2, (silent_min, window_min)
    # the next start finds it stopped behind the ledger's back and writes that down, so the
    # ledger stops billing its GPU time from there (never less than the market bills)
    for _ in range(2):  # twice: what the first start wrote down is not written again
        proc = _start(sim, tmp_path, ledger)
        _wait_for(proc, f"adopt  i:{iid}")
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=300)
    led = Ledger(ledger)
    [found] = led.events(
        where="kind = 'stop' AND actor = 'reconcile' AND instance_id = ?", params=[iid]
    )
    since, seen = found.detail["noticed_between"]
    assert since <= row["stopped_at"] <= seen == found.at
    mine = next(r for r in led.instance_rows() if r["instance_id"] == iid)
    end = max(e.at for e in led.events())
    truth = truth_at(sim, end)[iid]["usd"]
    gpu_dph = mine["gpu_dph"]
    assert (
        truth - 1e-6
        <= mine["total_usd"]
        # plus the market's own rounding: `uptime_mins` has two decimals (0.6 s), which dates
        # a start of running up to 0.6 s early
        <= truth + (seen - row["stopped_at"] + 0.6) / 3600 * gpu_dph + 1e-6
    )


@pytest.mark.parametrize(
    "ssh",
    [
        {"proc_environ": 0.0},  # sessions lack the variables, PID 1 unreadable: onstart's file
        {"proc_environ": 1.0, "container_env": 0.0},  # a pytorch host's fallback: PID 1
    ],
)
def test_the_watchdog_arms_on_an_image_that_is_not_vasts(make_sim, tmp_path, ssh):
    """[Q] SSH sessions on images that are not Vast's lack CONTAINER_ID/CONTAINER_API_KEY
    (vast-ai/docs docker-environment): the create's onstart exports them to /etc/environment,
    which the watchdog reads, and PID 1's environment stays its fallback."""
    sim = make_sim(seed=7, offers=60, time_scale=120, ssh=ssh)
    ledger = tmp_path / "l.duckdb"
    busy = '\n[[jobs]]\nname = "busy"\nrun = "sleep 60"\n'  # the campaign outlives the verify
    proc = _start(sim, tmp_path, ledger, fleet=1, extra=busy)
    lines = _wait_for(proc, "watchdog armed")
    iid = int(lines[-1].split("i:")[1].split()[0])
    proc.kill()
    proc.wait()
    _stopped_by_its_watchdog(sim, iid)
    assert not [r for r in _live(sim) if r["id"] == iid]
