"""`rentwatch ssh ID`: into a held instance of the simulator by the route the engine recorded,
with rentwatch's key; refused, with the reason, for one destroyed, stopped or never reached."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import pytest
from rentwatch.cli.main import main
from rentwatch.cli.ssh import route_of
from rentwatch.core.policy import get_policy
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign
from rentwatch.referee.stepped import run_stepped
from rentwatch.run.host import run_headless

from tests.campaigns import campaign_text

HEALTHY = [{"behaviour": "healthy", "share": 1.0}]


def _detached_campaign(sim, tmp_path, name="sshc"):
    """A campaign of two that leaves its fleet running (--detach): hosts to go into. The market
    runs on a stepped clock (`make_sim(stepped=True)`), which stands still once the engine is gone:
    the hosts' watchdogs, unfed since the detach, never stop them while the test's commands start
    (at 120x a loaded box's `rentwatch ssh` start let the watchdog stop the host: "Connection
    refused")."""
    ledger = tmp_path / "l.duckdb"
    campaign = load_campaign(campaign_text(name, 2))
    main = run_headless(
        campaign,
        get_policy("default"),
        sim.url,
        sim.api_key,
        str(ledger),
        detach=True,
        key_path=str(tmp_path / "key"),
        market_clock=sim.market.clock,
    )
    code = run_stepped(sim, main)
    assert code == 0
    return ledger


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client here")
def test_ssh_reaches_a_held_instance_by_its_recorded_route(make_sim, tmp_path, capsys):
    sim = make_sim(seed=4, offers=20, stepped=True, host_class=HEALTHY, ssh={"direct_share": 0.5})
    ledger = _detached_campaign(sim, tmp_path)
    capsys.readouterr()  # the campaign's log
    with Ledger(ledger, read_only=True) as led:
        routes = {e.instance_id: e.detail for e in led.events(where="kind = 'ssh_route'")}
        pinned = {
            e.instance_id: e.detail.get("host_key")
            for e in led.events(where="kind = 'preflight_passed'")
        }
        held = [
            r["instance_id"]
            for r in led.instance_rows()
            if r["destroyed_at"] is None and r["verified_at"] is not None
        ]
    assert held and set(held) <= set(routes)
    iid = held[0]
    kind, host, port, campaign = route_of(ledger, iid)
    assert (kind, f"{host}:{port}", campaign) == (routes[iid]["kind"], routes[iid]["where"], "sshc")

    key = tmp_path / "key"
    assert main(["ssh", str(iid), "--ledger", str(ledger), "--ssh-key", str(key), "--print"]) == 0
    cmd = shlex.split(capsys.readouterr().out)
    assert cmd[:5] == ["ssh", "-i", str(key), "-p", str(port)] and cmd[-1] == f"root@{host}"
    assert f"HostKeyAlias=rentwatch-{iid}" in cmd and "IdentitiesOnly=yes" in cmd

    # the real thing: the system ssh, our key, a command on the simulated host
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    argv = [sys.executable, "-m", "rentwatch", "ssh", str(iid), "--ledger", str(ledger)]
    argv += ["--ssh-key", str(key), "-c", "echo hello from $PWD"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "hello from" in done.stdout
    assert f"by its {kind} route" in done.stderr
    # the host key ssh met is the one the engine pinned at the preflight, kept per instance
    found = subprocess.run(
        ["ssh-keygen", "-l", "-F", f"rentwatch-{iid}", "-f", str(tmp_path / "known_hosts")],
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0 and pinned[iid] and pinned[iid] in found.stdout


def test_ssh_refuses_what_it_cannot_reach(make_sim, tmp_path, capsys):
    sim = make_sim(seed=4, offers=20, stepped=True, host_class=HEALTHY)
    ledger = _detached_campaign(sim, tmp_path, "sshr")
    with Ledger(ledger) as led:
        rows = led.instance_rows()
        live = next(r for r in rows if r["destroyed_at"] is None and r["verified_at"])
        # mark it stopped, as a stop's outcome would
        seq = led.intent("stop", at=1.0, actor="human", reason="t", instance_id=live["instance_id"])
        led.outcome(seq, at=2.0, ok=True)
        gone = next((r for r in rows if r["destroyed_at"] is not None), None)
    args = ["--ledger", str(ledger), "--ssh-key", str(tmp_path / "key"), "--print"]
    assert main(["ssh", str(live["instance_id"]), *args]) == 2
    assert "is stopped: start it first" in capsys.readouterr().err
    if gone is not None:
        assert main(["ssh", str(gone["instance_id"]), *args]) == 2
        assert "was destroyed" in capsys.readouterr().err
    assert main(["ssh", "99999999", *args]) == 2
    assert "is not in the ledger" in capsys.readouterr().err
    assert main(["ssh", "1", "--ledger", str(tmp_path / "none.duckdb")]) == 2
    assert "no ledger at" in capsys.readouterr().err
