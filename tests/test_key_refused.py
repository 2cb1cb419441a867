"""[Q] A key refused mid-run (Vast answers 404 `auth_error` "Invalid user key" on every call):
the campaign ends on its own, non-zero, says so in one line that names the key, and its ledger
claims nothing the market did not do (no destroy, no write-off)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from rentwatch.ledger import Ledger
from rentwatch.market.errors import AuthError, NotFound
from rentwatch.market.vast.transport import refusal

from .campaigns import run_campaign
from .revoking_proxy import RevokingProxy


@pytest.mark.parametrize(
    ("status", "code", "msg"),
    [
        (404, "auth_error", "Invalid user key"),
        (401, "auth_error", "Invalid user key"),
        (404, "http_error", "Session expired. Please log in again."),
        (403, "unauthorized", "bad key"),
    ],
)
def test_an_auth_refusal_is_never_not_found(status, code, msg):
    err = refusal(status, code, msg)
    assert isinstance(err, AuthError) and not isinstance(err, NotFound)


def test_a_real_not_found_stays_not_found():
    assert isinstance(refusal(404, "no_such_instance", "Instance 12 not found"), NotFound)


def _revoke_when_verified(sim, proxy: RevokingProxy, ledger_path) -> threading.Thread:
    """Revoke the key once the engine holds a verified host and another is booting."""

    def watch() -> None:
        deadline = time.time() + 90
        while time.time() < deadline and not proxy.revoked.is_set():
            running = [
                i
                for i in sim.call(sim.market.truth)["instances"]
                if i["actual_status"] == "running"
            ]
            if len(running) >= 2:
                proxy.revoke()
                return
            time.sleep(0.1)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_a_key_refused_mid_run_ends_the_campaign_claiming_nothing(make_sim, tmp_path, capsys):
    sim = make_sim(seed=7, offers=60, time_scale=120)
    proxy = RevokingProxy(sim.url).start()
    try:
        ledger_path = tmp_path / "l.duckdb"
        _revoke_when_verified(sim, proxy, ledger_path)
        t0 = time.monotonic()
        code, ledger_path = run_campaign(
            SimpleNamespace(url=proxy.url, api_key=sim.api_key),
            tmp_path,
            fleet=3,
            name="revoked",
            ledger=ledger_path,
        )
        took = time.monotonic() - t0
    finally:
        proxy.stop()
    err = capsys.readouterr().err
    assert proxy.revoked.is_set() and proxy.refused, "the key was never revoked"
    assert code != 0 and took < 60
    lines = [line for line in err.splitlines() if "API key" in line]
    assert len(lines) == 1, err
    assert "watchdog" in lines[0]  # what happens to the verified hosts it could not stop
    truth = {i["id"]: i for i in sim.call(sim.market.truth)["instances"]}
    led = Ledger(ledger_path)
    destroyed = {
        e.instance_id for e in led.events(where="kind = 'destroy' AND phase = 'outcome' AND ok")
    }
    stopped = {
        e.instance_id for e in led.events(where="kind = 'stop' AND phase = 'outcome' AND ok")
    }
    lost = {e.instance_id for e in led.events(where="kind = 'lost'")}
    # every destroy or stop the ledger claims, the market did; nothing is written off
    assert all(truth[i]["destroyed_at"] is not None for i in destroyed), destroyed
    assert all(truth[i]["stopped_at"] is not None or truth[i]["destroyed_at"] for i in stopped)
    assert not lost
    refused = led.events(where="phase = 'outcome' AND NOT ok AND kind IN ('stop', 'destroy')")
    assert refused and all("API key" in (e.reason or "") for e in refused), refused
