"""[Q] A key refused mid-run (Vast answers 404 `auth_error` "Invalid user key" on every call):
the campaign ends on its own, non-zero, says so in one line that names the key, and its ledger
claims nothing the market did not do (no destroy, no write-off)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from rentwatch.engine.supervisor import Supervisor
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


def _revoke_when_verified(proxy: RevokingProxy) -> Callable[[Supervisor], None]:
    """Revoke the key once the engine holds a verified host and another rental: watched from
    the engine's own loop, so what "verified" means is the engine's, however slow the box (a
    watch of the market's running rentals from another thread revoked, on a loaded box,
    before the engine had verified any)."""

    def on_supervisor(sup: Supervisor) -> None:
        async def watch() -> None:
            while not proxy.revoked.is_set():
                held = sup.held()
                if len(held) >= 2 and any(a.passed_preflight for a in held):
                    proxy.revoke()
                    return
                await asyncio.sleep(0.05)

        watching.add(asyncio.get_running_loop().create_task(watch()))

    watching: set[asyncio.Task[None]] = set()
    return on_supervisor


def test_a_key_refused_mid_run_ends_the_campaign_claiming_nothing(make_sim, tmp_path, capsys):
    sim = make_sim(seed=7, offers=60, time_scale=120)
    proxy = RevokingProxy(sim.url).start()
    try:
        ledger_path = tmp_path / "l.duckdb"
        code, ledger_path = run_campaign(
            SimpleNamespace(url=proxy.url, api_key=sim.api_key),
            tmp_path,
            fleet=3,
            name="revoked",
            ledger=ledger_path,
            on_supervisor=_revoke_when_verified(proxy),
        )
    finally:
        proxy.stop()
    err = capsys.readouterr().err
    assert proxy.revoked.is_set() and proxy.refused, "the key was never revoked"
    assert code != 0
    # it gave up at once: no refused call asked again and again (a retry loop would ask one
    # up to its 8 tries), and a handful in all (a rule's destroy, then the trap's, may ask
    # for the same rental twice)
    assert max(Counter(proxy.refused).values()) <= 3 and len(proxy.refused) <= 15, proxy.refused
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
