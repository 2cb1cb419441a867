"""The probes/blame work (issue 16) and the market-fidelity work (issue 19) wired into the
supervisor, end to end against the simulator: whose fault a failure is, the deeper host checks,
SSH routes in the ledger, unknown statuses, offline billing and the market's own stops."""

from __future__ import annotations

import pytest
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign

from .campaigns import campaign_text, headless, run_campaign, truth_at

HEALTHY = ("healthy", "slow_pull", "throttled")
# A stepped campaign's CPU goes with its market minutes: healthy hosts that pull in 1-3
# minutes, not the default 6-16, where what is judged is not the pull
QUICK = {"pull_min": [1.0, 3.0]}
HEALTHY_QUICK = {"behaviour": "healthy", **QUICK}


def _run(sim, tmp_path, image, fleet=3, policy="default", extra=""):
    """A headless campaign as `run_campaign` runs it, on another image."""
    text = campaign_text("t", fleet, extra).replace(
        'image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"', f'image = "{image}"'
    )
    ledger = tmp_path / f"{policy}.duckdb"
    return headless(sim, load_campaign(text), policy, ledger, tmp_path), ledger


def _blamed(led: Ledger) -> dict[int, str]:
    """Instance id -> whom its abandon blames (suspect / campaign), where it spared the host."""
    return {
        e.instance_id: e.detail["blame"]
        for e in led.events(where="kind = 'abandon'")
        if e.detail.get("blame")
    }


def _healthy_harmed(led: Ledger, truth: dict[int, dict]) -> list[tuple[int, str, str | None]]:
    """Healthy hosts destroyed or quarantined by automation (a campaign's end aside, and a
    campaign's fault, which spares the host)."""
    out = []
    quarantined = {e.machine_id for e in led.events(where="kind = 'quarantine'")}
    spared = _blamed(led)
    for r in led.instance_rows():
        b = truth[r["instance_id"]]["behaviour"]
        cls = r["failure_class"]
        if b in HEALTHY and (
            (cls not in (None, "cancelled") and r["instance_id"] not in spared)
            or r["machine_id"] in quarantined
        ):
            out.append((r["instance_id"], b, cls))
    return out


def test_an_image_without_torch_verifies_its_fleet_by_the_driver_path(make_sim, tmp_path):
    sim = make_sim(seed=11, offers=30, stepped=True, host_class=[{**HEALTHY_QUICK, "share": 1.0}])
    code, ledger = _run(sim, tmp_path, "ghcr.io/nvidia/jax:24.04-py3", fleet=3)
    led = Ledger(ledger)
    truth = truth_at(sim, max(e.at for e in led.events()))
    assert code == 0
    passed = led.events(where="kind = 'preflight_passed'")
    assert len(passed) >= 3
    assert all("driver API" in e.reason for e in passed)
    assert not led.events(where="kind IN ('quarantine', 'campaign_fault')")
    assert _healthy_harmed(led, truth) == []
    led.close()


def test_an_image_that_cannot_be_pulled_stops_after_two_machines(make_sim, tmp_path, capsys):
    sim = make_sim(
        seed=5,
        offers=30,
        stepped=True,  # a loaded box must not read as hosts dead or frozen
        host_class=[{"behaviour": "healthy", "share": 1.0}],
        image=[{"name": "ghcr.io/acme/private:*", "pullable": False}],
    )
    code, ledger = _run(sim, tmp_path, "ghcr.io/acme/private:1.0", fleet=3)
    led = Ledger(ledger)
    assert code != 0
    faults = led.events(where="kind = 'campaign_fault'")
    assert len(faults) == 1 and "private" in faults[0].reason
    rows = led.instance_rows()
    # fleet 3: the first poll rents one, the next two more (before any pull could fail); after
    # the registry's first refusal no machine is rented, and the second refusal decides
    assert len(rows) <= 3
    assert sum(1 for r in rows if r["created_at"] > faults[0].at) == 0
    first_refusal = min(r["abandoned_at"] for r in rows)
    assert sum(1 for r in rows if r["created_at"] > first_refusal) == 0
    assert not led.events(where="kind = 'quarantine'")
    blamed = _blamed(led)
    assert all(r["instance_id"] in blamed for r in rows if r["abandoned_at"])
    assert "campaign" in blamed.values()
    out = capsys.readouterr().out
    assert "FAULT" in out and "end    campaign fault: " in out
    # no reputation penalty: the machines' record shows no dud
    assert not any(r.dud for r in led.rentals())
    led.close()


NEW = ("narrow_pcie", "short_vram", "slow_disk", "slow_net", "xid_mid_job")


@pytest.mark.parametrize("behaviour", NEW)
def test_each_new_host_behaviour_is_caught_and_no_healthy_host_killed(
    make_sim, tmp_path, behaviour
):
    # quick pulls but a slow_net host's (its pull is its fault), and an XID 3-10 minutes into
    # a job (the default 8-30), whose jobs end at their timeout
    quick = {**QUICK, "xid_after_min": [3.0, 10.0]}
    sim = make_sim(
        seed=3,
        offers=24,
        stepped=True,  # a loaded box must not read as hosts dead or frozen
        host_class=[
            {"behaviour": "healthy", "share": 0.4, **quick},
            {"behaviour": behaviour, "share": 0.6, **({} if behaviour == "slow_net" else quick)},
        ],
    )
    # an XID comes under load, minutes into a job; the other checks judge the preflight
    job = '\n[[jobs]]\nname = "j{n}"\nrun = "sleep 600"\ntimeout_min = 15\n'
    jobs = "".join(job.format(n=n) for n in range(3)) if behaviour == "xid_mid_job" else ""
    code, ledger = run_campaign(sim, tmp_path, "default", fleet=3, extra=jobs)
    led = Ledger(ledger)
    truth = truth_at(sim, max(e.at for e in led.events()))
    assert _healthy_harmed(led, truth) == []
    bad = [r for r in led.instance_rows() if truth[r["instance_id"]]["behaviour"] == behaviour]
    assert bad, "the scenario rented no host with the behaviour"
    caught = {r["instance_id"] for r in bad if r["failure_class"] not in (None, "cancelled")}
    caught |= {e.instance_id for e in led.events(where="kind = 'xid'")}
    assert caught, [(r["instance_id"], r["failure_class"]) for r in bad]
    led.close()


def test_routes_scheduling_and_build_output_abandon_no_healthy_host(make_sim, tmp_path):
    """Issue 19's done-when: half the hosts direct, the proxy drops 8% of sessions, boots pass
    through `scheduling` and a state no list names, status lines carry build output."""
    sim = make_sim(
        seed=19,
        offers=30,
        stepped=True,  # a loaded box must not read as hosts dead or frozen
        host_class=[{**HEALTHY_QUICK, "share": 1.0}],
        ssh={"direct_share": 0.5, "proxy_drop": 0.08},
        states={"scheduling_share": 0.6, "unnamed_share": 0.7, "build_output_share": 0.8},
    )
    code, ledger = run_campaign(sim, tmp_path, "default", fleet=4)
    led = Ledger(ledger)
    assert code == 0
    rows = led.instance_rows()
    assert [r["failure_class"] for r in rows if r["failure_class"] not in (None, "cancelled")] == []
    verified = {r["instance_id"] for r in rows if r["verified_at"] is not None}
    assert len(verified) >= 4
    routes = {e.instance_id: e.detail["kind"] for e in led.events(where="kind = 'ssh_route'")}
    assert verified <= set(routes), "the ledger must say which route each host used"
    assert set(routes.values()) <= {"direct", "proxy"}
    statuses = {e.detail.get("status") for e in led.events(where="kind = 'status'")}
    assert "scheduling" in statuses and "unknown" in statuses
    led.close()
