"""[Q] SSH keys on existing instances: Vast's account keys reach new instances only (vast-ai/docs
guides/instances/connect/ssh.mdx), and the simulator holds to that. So after a key change, the
instances a restarted controller adopts get its new key attached (POST
/api/v0/instances/{id}/ssh/), checked against the instance's own key list, before any session:
their jobs are reattached, none lost or run twice."""

from __future__ import annotations

import asyncssh
import httpx
from rentwatch.ledger import Ledger

from .campaigns import campaign_text
from .test_jobs import KILLED, KILLED_JOBS, kill_9_mid_jobs_then_restart


def test_an_account_key_added_later_does_not_reach_an_existing_instance(make_sim):
    sim = make_sim(
        seed=3, offers=10, time_scale=60, host_class=[{"behaviour": "healthy", "share": 1.0}]
    )
    headers = {"Authorization": f"Bearer {sim.api_key}"}
    with httpx.Client(base_url=sim.url, headers=headers) as http:
        offer = http.post("/api/v0/bundles/", json={"limit": 1}).json()["offers"][0]
        made = http.put(
            f"/api/v0/asks/{offer['id']}/", json={"image": "pytorch/pytorch", "disk": 10}
        )
        iid = made.json()["new_contract"]
        key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
        assert http.post("/api/v0/ssh/", json={"ssh_key": key}).status_code == 200
        got = http.get(f"/api/v0/instances/{iid}/ssh/").json()
        assert key not in got["ssh_keys"]  # the account's new key: new instances only
        assert http.post(f"/api/v0/instances/{iid}/ssh/", json={"ssh_key": key}).status_code == 200
        assert key in http.get(f"/api/v0/instances/{iid}/ssh/").json()["ssh_keys"]


def test_a_restart_with_a_new_key_attaches_it_to_what_it_adopts(make_sim, tmp_path):
    sim = make_sim(seed=7, offers=60, time_scale=120)
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("rekey", 2) + KILLED_JOBS)
    ledger = tmp_path / "l.duckdb"
    # a key change while nothing watches: the next start makes a new key
    proc = kill_9_mid_jobs_then_restart(
        sim, tmp_path, camp, ledger, between=(tmp_path / "key").unlink
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    led = Ledger(ledger)
    adopted = {e.instance_id for e in led.events(where="kind = 'adopted'")}
    attached = {
        e.instance_id
        for e in led.events(where="kind = 'note' AND ok")
        if e.detail.get("class") == "ssh_key_attach"
    }
    assert attached and attached <= adopted  # each adopted host it reached, before reaching it
    done = [e.detail["job"] for e in led.events(where="kind = 'job_finished' AND ok")]
    assert sorted(done) == sorted(f"job-{i}" for i in range(KILLED)), (
        "a job was lost or finished twice"
    )
    reattached = {
        e.instance_id
        for e in led.events(where="kind = 'job_finished' AND ok")
        if e.instance_id in adopted
    }
    assert reattached, "no job finished on an adopted host: its new key never reached it"
