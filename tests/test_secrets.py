"""The account's API key reaches no host, no ledger row and no log line."""

from __future__ import annotations

from rentwatch.ledger import Ledger

from .campaigns import run_campaign


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
    led = Ledger(ledger)
    led.checkpoint()
    led.close()
    assert key.encode() not in ledger.read_bytes()
