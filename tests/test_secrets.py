"""The account's API key reaches no host, no ledger row and no log line."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

from rentwatch.ledger import Ledger
from rentwatch.market.errors import AuthError, MarketUnavailable
from rentwatch.market.vast.client import VastClient

from .campaigns import campaign_text, headless_cmd, headless_env, run_campaign
from .test_dashboard import _until


def test_api_key_never_leaves_the_controller(make_sim, tmp_path, capsys):
    key = "acct-key-4d1f0c7e9b2a"
    sim = make_sim(api_key=key, seed=7, offers=60, time_scale=240)
    sim.call(lambda: setattr(sim.ssh, "received", []))
    code, ledger = run_campaign(sim, tmp_path, "default", fleet=3)
    assert code == 0
    sent = sim.call(lambda: list(sim.ssh.received))
    assert any(
        b"rentwatch-probe: preflight" in chunk for chunk in sent
    )  # the recording saw the probes
    assert any(b"rentwatch-probe: watchdog" in chunk for chunk in sent)
    assert not [chunk for chunk in sent if key.encode() in chunk]
    out = capsys.readouterr()
    assert key not in out.out and key not in out.err
    Ledger(ledger).close()  # its write-ahead log checkpointed into the file
    assert key.encode() not in ledger.read_bytes()


def test_api_key_not_in_screenshots(make_sim, dashboard):
    """Every screen the operator can save as a screenshot, from a live campaign."""
    key = "acct-key-7f00ba11c0de"
    sim = make_sim(api_key=key, seed=7, offers=40, time_scale=240)
    app, _, _ = dashboard(sim)

    async def run() -> list[str]:
        shots = []
        async with app.run_test(size=(140, 40)) as pilot:
            await _until(pilot, lambda: app.latest and app.latest.creates >= 2)
            await pilot.pause(1.0)
            for keys in ([], ["t"], ["l", "ctrl+1"], ["escape", "r"]):
                for k in keys:
                    await pilot.press(k)
                    await pilot.pause(0.5)
                shots.append(app.export_screenshot())
        return shots

    shots = asyncio.run(run())
    assert len(shots) == 4 and all("<svg" in s for s in shots)
    assert not [s for s in shots if key in s]


def test_api_key_not_in_errors_or_the_process_list(make_sim, tmp_path):
    key = "acct-key-0ddba11feed5"

    async def errors() -> list[BaseException]:
        out: list[BaseException] = []
        async with VastClient(
            "http://127.0.0.1:9", key, max_attempts=1, backoff=0, min_intervals={}
        ) as dead:
            assert key not in repr(dead)
            try:
                await dead.list_instances()
            except MarketUnavailable as exc:
                out.append(exc)
        sim = make_sim(api_key="other", offers=3)
        async with VastClient(sim.url, key, min_intervals={}) as wrong:
            try:
                await wrong.list_instances()
            except AuthError as exc:
                out.append(exc)
        return out

    errs = asyncio.run(errors())
    assert len(errs) == 2
    assert not [e for e in errs if key in str(e) or key in repr(e) or key in str(e.__cause__)]

    sim = make_sim(api_key=key, seed=7, offers=20, time_scale=120)
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("ps", 1))
    cmd = headless_cmd(sim, tmp_path, camp, tmp_path / "l.duckdb")
    proc = subprocess.Popen(
        cmd, env=headless_env(sim), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        time.sleep(2)
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert "rentwatch" in ps and key not in ps
        assert key.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert key.encode() not in out
    # the flag still works, with a warning that says why not to use it
    flagged = subprocess.run(
        [*cmd, "--campaign", str(tmp_path / "missing.toml"), "--api-key", key],
        capture_output=True,
        text=True,
        env=headless_env(sim),
    )
    assert "visible in the process list" in flagged.stderr
    assert key not in flagged.stdout + flagged.stderr
