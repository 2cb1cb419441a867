"""The official `vastai` CLI, unchanged, against the simulator: every answer is read, since
the CLI exits 0 even on API errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(
    shutil.which("vastai") is None
    and not os.path.exists(os.path.join(os.path.dirname(sys.executable), "vastai")),
    reason="vastai CLI not installed",
)


def vastai(sim, *args: str, key: str | None = None, tmp_path=None) -> str:
    exe = shutil.which("vastai") or os.path.join(os.path.dirname(sys.executable), "vastai")
    env = dict(os.environ, VAST_URL=sim.url, VASTAI_NO_UPDATE_CHECK="1", COLUMNS="200")
    if tmp_path is not None:
        env["HOME"] = str(tmp_path)
    r = subprocess.run(
        [exe, "--url", sim.url, "--api-key", key or sim.api_key, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    return r.stdout + r.stderr


def test_official_cli_full_cycle(make_sim, tmp_path):
    sim = make_sim(time_scale=600, offers=20, seed=3)
    out = vastai(sim, "search", "offers", "num_gpus=1 dph_total<5", "--raw", tmp_path=tmp_path)
    offers = json.loads(out[out.index("[") :])
    assert len(offers) == 20
    healthy = next(m for m in sim.market.machines if m.behaviour == "healthy")
    table = vastai(sim, "search", "offers", f"machine_id={healthy.id}", tmp_path=tmp_path)
    assert str(healthy.offer_id) in table and healthy.advertised_gpu.replace(" ", "_") in table

    out = vastai(
        sim,
        "create",
        "instance",
        str(healthy.offer_id),
        "--image",
        "pytorch/pytorch:2.4.0",
        "--disk",
        "20",
        tmp_path=tmp_path,
    )
    assert "new_contract" in out, out
    iid = int(out.split("'new_contract': ")[1].split(",")[0])

    raw = json.loads(vastai(sim, "show", "instances", "--raw", tmp_path=tmp_path))
    assert [r["id"] for r in raw] == [iid]
    assert raw[0]["image_uuid"] == "pytorch/pytorch:2.4.0" and raw[0]["disk_space"] == 20
    assert str(iid) in vastai(sim, "show", "instances", tmp_path=tmp_path)
    one = vastai(sim, "show", "instance", str(iid), tmp_path=tmp_path)
    assert str(iid) in one and str(healthy.id) in one

    # wait (sim time runs 600x) until running, then read the boot log through result_url
    deadline = time.time() + 30
    while time.time() < deadline:
        row = json.loads(vastai(sim, "show", "instance", str(iid), "--raw", tmp_path=tmp_path))
        if row["actual_status"] == "running" and row["ssh_port"]:
            break  # the sim opens SSH on its next tick after the container runs
        time.sleep(0.5)
    assert row["actual_status"] == "running" and row["ssh_port"]
    logs = vastai(sim, "logs", str(iid), tmp_path=tmp_path)
    assert "Pulling fs layer" in logs and "success, running" in logs

    assert f"stopping instance {iid}" in vastai(
        sim, "stop", "instance", str(iid), tmp_path=tmp_path
    )
    row = json.loads(vastai(sim, "show", "instance", str(iid), "--raw", tmp_path=tmp_path))
    assert row["actual_status"] == "stopped" and row["intended_status"] == "stopped"
    assert f"starting instance {iid}" in vastai(
        sim, "start", "instance", str(iid), tmp_path=tmp_path
    )
    row = json.loads(vastai(sim, "show", "instance", str(iid), "--raw", tmp_path=tmp_path))
    assert row["intended_status"] == "running"

    assert f"destroying instance {iid}" in vastai(
        sim, "destroy", "instance", str(iid), "-y", tmp_path=tmp_path
    )
    assert "not found" in vastai(sim, "show", "instance", str(iid), tmp_path=tmp_path)
    assert "Instance does not exist" in vastai(
        sim, "destroy", "instance", str(iid), "-y", tmp_path=tmp_path
    )
    truth = sim.call(sim.market.truth)
    assert truth["instances"][0]["destroyed_at"] is not None


def test_official_cli_wrong_key_and_missing_offer(make_sim, tmp_path):
    sim = make_sim(offers=5)
    assert "401" in vastai(sim, "show", "instances", key="wrong", tmp_path=tmp_path)
    out = vastai(
        sim, "create", "instance", "999", "--image", "x", "--disk", "10", tmp_path=tmp_path
    )
    assert "not available" in out
