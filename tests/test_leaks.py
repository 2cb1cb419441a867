"""Nothing bills unwatched (issue 45): every rental under the campaign's label is the
campaign's until the market shows it gone, whatever cut a create short; an outbid pause gets
our own stop. Each test fails with its protection removed."""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rentwatch.cli.main import main
from rentwatch.core.policy import DEFAULT
from rentwatch.engine.ending import end_campaign
from rentwatch.engine.hosts.ssh import load_or_create_key
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign

from .campaigns import campaign_text, headless, headless_cmd, headless_env
from .hostile_market import HostileMarket, Hostility
from .test_bid_engine import JOB, bid_market, proven
from .test_hostile_host import _read_until
from .test_supervisor_unit import run

# image pulls of 1-3 market minutes, not the default 6-16: at 60x a boot is then seconds, not a
# quarter of a minute of wall time, and no test here is about how long a boot takes
HEALTHY = [{"behaviour": "healthy", "share": 1.0, "pull_min": [1, 3]}]
HOLD_S = 20.0  # the slow market's create answer at most, as the report held it


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load_or_create_key(tmp_path_factory.mktemp("k") / "key")


def _billing(sim) -> list[dict]:
    """Every rental the market still bills GPU for (neither destroyed nor stopped)."""
    t = sim.call(sim.market.truth)
    return [
        r for r in t["instances"] if r["destroyed_at"] is None and r["actual_status"] != "stopped"
    ]


def _slow_create_run(make_sim, tmp_path: Path, name: str):
    """A headless run behind a market that holds every create's answer (HOLD_S at most, or
    until `proxy.release_creates()`); returns the sim, the proxy, the process and the ledger
    once a create is being held: the rental exists, its id not yet answered."""
    sim = make_sim(seed=7, offers=30, time_scale=60, host_class=HEALTHY)
    proxy = HostileMarket(sim.url, Hostility(hold_create_s=HOLD_S)).start()
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text(name, 1))
    ledger = tmp_path / "l.duckdb"
    cmd = headless_cmd(SimpleNamespace(url=proxy.url), tmp_path, camp, ledger)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=headless_env(sim)
    )
    assert proxy.creates_held.wait(60), "no create was sent"
    assert _billing(sim), "the held create made no rental"
    return sim, proxy, proc, ledger


def test_a_signal_while_a_create_is_answered_slowly_releases_that_rental(make_sim, tmp_path):
    """SIGTERM while the market holds a create's answer: the trap waits for the answer (the
    create is not cancelled with its caller) and sweeps the label, so the rental being made
    is destroyed, not left running with a `create` intent and no outcome. The answer is let
    go once the trap says it is releasing, not after the whole hold."""
    sim, proxy, proc, ledger = _slow_create_run(make_sim, tmp_path, "slowc")
    try:
        proc.send_signal(signal.SIGTERM)
        seen = _read_until(proc, "any create in flight", HOLD_S, whole=True)
        proxy.release_creates()
        out, _ = proc.communicate(timeout=HOLD_S + 60)
        out = seen + out
    finally:
        proxy.stop()
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert _billing(sim) == [], out
    with Ledger(ledger, read_only=True) as led:
        assert led.unfinished_intents() == []
        made = {e.instance_id for e in led.events(where="kind = 'create' AND ok")}
        ended = {
            e.instance_id for e in led.events(where="kind = 'destroy' AND actor = 'trap' AND ok")
        }
    assert made and made <= ended, out


def test_kill_9_mid_create_then_end_finds_it_by_its_label(make_sim, tmp_path, capsys):
    """kill -9 while a create's answer is held: the ledger holds the intent alone. `end` asks
    the market for the campaign's label, settles the create, destroys the rental, and only
    then says that nothing is left."""
    sim, proxy, proc, ledger = _slow_create_run(make_sim, tmp_path, "killc")
    proc.kill()
    proc.wait()
    try:
        with Ledger(ledger, read_only=True) as led:
            assert [e.kind for e in led.unfinished_intents()] == ["create"]
        [running] = _billing(sim)
        capsys.readouterr()
        code = main(
            ["end", "--campaign", "killc", "--ledger", str(ledger), "--market-url", proxy.url,
             "--api-key", sim.api_key, "--yes", "killc"]
        )  # fmt: skip
    finally:
        proxy.stop()
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"destroyed unverified i:{running['id']}" in out
    assert "nothing of killc is left billing" in out.splitlines()[-1]
    assert _billing(sim) == []
    with Ledger(ledger, read_only=True) as led:
        assert led.unfinished_intents() == []


def test_end_through_the_controller_sends_our_stop_to_an_outbid_pause(key):
    """A verified bid rental the market paused (outbid) resumes by itself: a person's end
    sends our own stop, and never says it "was stopped already"."""

    async def body(sup, market, ledger):
        iid = await proven(sup, market)
        market.t += 60
        market.outbid(iid, bid_floor=0.44)
        await sup.poll_once()
        assert ("stop_instance", iid) not in market.calls
        done = await end_campaign(sup, destroy=False)
        assert ("stop_instance", iid) in market.calls
        assert not any("stopped already" in line for line in done.lines), done
        assert ("destroy_instance", iid) not in market.calls

    run(key, body, market=bid_market(), policy=DEFAULT, rental="interruptible", jobs=(JOB,))


def test_end_without_a_controller_sends_our_stop_to_an_outbid_pause(key, tmp_path, capsys,
                                                                     monkeypatch):  # fmt: skip
    """The controller killed while its verified bid rental is paused; `end` (no controller,
    straight to the market) reads the ledger's last stop as the market's and stops it."""
    import rentwatch.market.factory as factory

    market, path = bid_market(), tmp_path / "l.duckdb"
    held: list[int] = []

    async def first(sup, market, ledger):
        iid = await proven(sup, market)
        market.t += 60
        market.outbid(iid, bid_floor=0.44)
        await sup.poll_once()
        held.append(iid)

    ledger = Ledger(path)
    run(
        key,
        first,
        market=market,
        ledger=ledger,
        policy=DEFAULT,
        rental="interruptible",
        jobs=(JOB,),
    )
    ledger.close()  # kill -9: no release, no campaign_end

    # `end` opens its market through the one factory: here, the fake market itself
    monkeypatch.setattr(factory, "open_market", lambda *_, **__: market)
    capsys.readouterr()
    code = main(
        ["end", "--campaign", "u", "--ledger", str(path), "--market-url", market.base_url,
         "--api-key", "k", "--yes", "u"]
    )  # fmt: skip
    got = capsys.readouterr()
    out = got.out
    assert ("stop_instance", held[0]) in market.calls, (code, out, got.err)
    assert "stopped already" not in out
    assert f"stopped verified i:{held[0]}" in out
    assert code == 1  # a stopped verified rental still bills its storage: said, exit 1


SLOW_JOBS = "".join(
    f"""
[[jobs]]
name = "job-{i}"
run = "mkdir -p out && python3 -c \\"import time; time.sleep(2.5); open('out/r{i}.txt', 'w').write('{i}')\\""
artifacts = ["out/r{i}.txt"]
"""
    for i in range(8)
)


def _ctrl_c_once_two_hosts_run_jobs(sup) -> None:
    """Ctrl-C (a real SIGINT, taken by the run's exit trap on its loop) once jobs started on two
    hosts: two jobs started on one (the second host may verify after the first, which meanwhile
    ends a job and starts the next) prove one."""
    say, hosts = sup.journal.log, set()

    def log(line: str) -> None:
        say(line)
        if len(hosts) < 2:
            hosts.update(re.findall(r" started on (i:\d+)", line))
            if len(hosts) == 2:
                asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGINT)

    sup.journal.log = log


def test_a_restart_after_ctrl_c_starts_its_proven_rentals_before_creating(
    make_sim, tmp_path, monkeypatch
):
    """Ctrl-C with jobs running leaves the proven hosts stopped (the trap's stop). The same
    command again starts them (rule:reuse) before anything new is created, runs the jobs on
    them, and creates nothing while they suffice. Both runs on the market's stepped clock: at
    a wall pace, a reused host's SSH slow on a loaded box read as one that does not answer."""
    monkeypatch.chdir(tmp_path)
    sim = make_sim(seed=7, offers=60, stepped=True, host_class=HEALTHY)
    campaign = load_campaign(campaign_text("carry", 2) + SLOW_JOBS)
    ledger = tmp_path / "l.duckdb"
    code = headless(
        sim, campaign, "default", ledger, tmp_path, on_supervisor=_ctrl_c_once_two_hosts_run_jobs
    )
    assert code == 128 + signal.SIGINT
    with Ledger(ledger, read_only=True) as led:
        proven = {e.instance_id for e in led.events(where="kind = 'preflight_passed'")}
        trapped = {e.instance_id for e in led.events(where="kind = 'stop' AND actor = 'trap'")}
        first_done = len(led.events(where="kind = 'job_finished' AND ok"))
    assert len(proven) == 2 and proven <= trapped
    assert first_done < 8
    assert headless(sim, campaign, "default", ledger, tmp_path) == 0
    with Ledger(ledger, read_only=True) as led:
        [_, start] = led.events(where="kind = 'campaign_start'")
        later = [e for e in led.events(where="seq > ?", params=[start.seq])]
        finished = {e.detail["job"] for e in led.events(where="kind = 'job_finished' AND ok")}
    reused = {
        e.instance_id
        for e in later
        if e.kind == "start" and e.actor == "rule:reuse" and e.phase == "outcome" and e.ok
    }
    assert reused == proven
    # nothing created while they suffice: a create only once one of them left service
    creates = [e.seq for e in later if e.kind == "create"]
    left = [
        e.seq
        for e in later
        if e.instance_id in proven and e.kind in ("stop", "destroy", "abandon", "lost")
    ]
    assert not creates or (left and min(left) < min(creates))
    ran_on = {e.instance_id for e in later if e.kind == "job_started"}
    assert proven <= ran_on
    assert finished == {f"job-{i}" for i in range(8)}


def _last_lines(out: str) -> list[str]:
    """The run's closing block: from its `left billing` line to the end."""
    lines = out.rstrip().splitlines()
    start = max(i for i, ln in enumerate(lines) if ln.startswith("left billing"))
    return lines[start:]


def test_a_market_down_exit_names_each_rental_still_billing(make_sim, tmp_path):
    """The market goes down for good (exit 4): the trap's stops and destroys fail, and the last
    lines name every rental the market still holds, its state and $/h, and the `end` command
    with `--market-url` (not Vast's) and the ledger."""
    sim = make_sim(seed=7, offers=40, time_scale=600, host_class=HEALTHY)
    proxy = HostileMarket(sim.url, Hostility(fail_status=503, fail_after_lists=6)).start()
    try:
        camp, ledger = tmp_path / "c.toml", tmp_path / "l.duckdb"
        camp.write_text(campaign_text("gone", 2, '\n[[jobs]]\nname = "a"\nrun = "sleep 300"\n'))
        cmd = headless_cmd(SimpleNamespace(url=proxy.url), tmp_path, camp, ledger)
        env = headless_env(sim, RENTWATCH_MARKET_DOWN_S="5")
        r = subprocess.run(cmd + ["--http-timeout", "1.0"], capture_output=True, text=True,
                           env=env, cwd=tmp_path, timeout=240)  # fmt: skip
    finally:
        proxy.stop()
    assert r.returncode == 4, r.stderr[-2000:]
    left = [row for row in sim.call(sim.market.truth)["instances"] if row["destroyed_at"] is None]
    assert left, "the market held nothing when it went down: the test proves nothing"
    tail = _last_lines(r.stdout)
    assert tail[0] == f"left billing: {len(left)} rental(s) of gone still on the market:", tail
    for row in left:
        [line] = [ln for ln in tail if ln.startswith(f"  i:{row['id']} ")]
        assert "/h" in line and "$" in line, line
    end = next(ln for ln in tail if ln.startswith("end them: "))
    assert end == (
        f"end them: rentwatch end --campaign gone --ledger {ledger.resolve()} "
        f"--market-url {proxy.url}"
    ), tail


def test_ctrl_c_names_its_stopped_rentals_and_the_printed_end_works(
    make_sim, tmp_path, monkeypatch, capsys
):
    """Ctrl-C with proven hosts running jobs: the trap stops them, and the last lines list
    them stopped, at their storage's $/h, with the command that ends them; that command,
    pasted as printed (and confirmed), leaves nothing on the market."""
    sim = make_sim(seed=7, offers=60, time_scale=60, host_class=HEALTHY)
    camp, ledger = tmp_path / "c.toml", tmp_path / "l.duckdb"
    camp.write_text(
        campaign_text("ctrlc", 2) + SLOW_JOBS.replace("time.sleep(2.5)", "time.sleep(60)")
    )
    cmd, env = headless_cmd(sim, tmp_path, camp, ledger), headless_env(sim)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path
    )
    # jobs running on both hosts: two jobs started on one (the second host may verify after
    # the first, which meanwhile ends a job and starts the next) prove one
    seen, deadline = "", time.time() + 300  # a ceiling on a hang only
    while time.time() < deadline and len(set(re.findall(r" started on (i:\d+)", seen))) < 2:
        seen += proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)  # a ceiling on a hang only
    assert proc.returncode == 128 + signal.SIGINT, seen + out
    with Ledger(ledger, read_only=True) as led:
        stopped = {
            r["instance_id"]: r["storage_dph"]
            for r in led.instance_rows()
            if r["stopped_at"] and not r["destroyed_at"]
        }
    assert len(stopped) == 2, out
    tail = _last_lines(out)
    for iid, dph in stopped.items():
        [line] = [ln for ln in tail if ln.startswith(f"  i:{iid} ")]
        assert "stopped (storage only)" in line and line.endswith(f"${dph:.4f}/h"), line
    printed = next(ln for ln in tail if ln.startswith("end them: ")).removeprefix("end them: ")
    assert printed.endswith("--destroy")
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    monkeypatch.chdir("/")  # pasted anywhere
    capsys.readouterr()
    assert main(shlex.split(printed)[1:] + ["--yes", "ctrlc"]) == 0, capsys.readouterr().out
    left = [row for row in sim.call(sim.market.truth)["instances"] if row["destroyed_at"] is None]
    assert left == []
