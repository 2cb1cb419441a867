"""The referee: its table's sums come from the sim's truth, whatever the scenario."""

from __future__ import annotations

import json

import pytest
from rentwatch.cli import main
from rentwatch.referee import score

CAMPAIGN = """
name = "ref"
image = "img"
image_cuda = "12.0"
disk_gb = 20
offer_query = "num_gpus=1"
max_dph = 1.0
fleet = 1
max_creates = 12
budget_usd = 5.0
"""


def _referee_json(tmp_path, capsys, scenario, time_scale: str) -> dict:
    """`rentwatch referee --json` for seed and default, one seed, on `scenario`."""
    camp = tmp_path / "c.toml"
    camp.write_text(CAMPAIGN)
    args = ["referee", "--scenario", str(scenario), "--campaign", str(camp)]
    args += ["--policies", "seed,default", "--seeds", "1", "--json", "--time-scale", time_scale]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_referee_json_against_truth(tmp_path, capsys):
    scen = tmp_path / "s.toml"
    scen.write_text(
        'seed = 3\noffers = 12\n[[host_class]]\nbehaviour = "healthy"\nshare = 0.5\n'
        '[[host_class]]\nbehaviour = "fatal_pull"\nshare = 0.5\nfatal_at_min = [0.5, 1.0]\n'
    )
    out = _referee_json(tmp_path, capsys, scen, "300")
    assert set(out) == {"scenario", "runs", "summary"}
    need = {
        "policy",
        "seed",
        "warm",
        "dud_usd",
        "duds",
        "dud_mean_lifetime_min",
        "false_kills",
        "time_to_fleet_min",
        "jobs_finished",
        "total_usd",
        "usd_per_gpu_hour",
    }
    for run in out["runs"]:
        assert need <= set(run)
        assert run["false_kills"] == 0
        assert run["total_usd"] >= run["dud_usd"] >= 0
    assert out["summary"]["seed"]["dud_usd_vs_seed"] in (1.0, None)


def test_score_sums():
    truth = {
        "now": 10_000.0,
        "instances": [
            {
                "created_at": 0.0,
                "behaviour": "fatal_pull",
                "running_at": None,
                "destroyed_at": 300.0,
                "stopped_at": None,
                "total_usd": 0.02,
            },
            {
                "created_at": 0.0,
                "behaviour": "healthy",
                "running_at": 600.0,
                "destroyed_at": None,
                "stopped_at": 4200.0,
                "total_usd": 0.30,
            },
            {
                "created_at": 100.0,
                "behaviour": "healthy",
                "running_at": None,
                "destroyed_at": 500.0,
                "stopped_at": None,
                "total_usd": 0.01,
            },
            {
                "created_at": -50.0,
                "behaviour": "healthy",
                "running_at": 1.0,
                "destroyed_at": None,
                "stopped_at": None,
                "total_usd": 9.0,
            },  # from an earlier run: not scored
        ],
    }
    s = score(truth, start=0.0, finish=4000.0, jobs_done=0)
    assert s["duds"] == 2 and abs(s["dud_usd"] - 0.03) < 1e-9
    assert s["false_kills"] == 1  # a healthy machine destroyed before the end
    assert abs(s["dud_mean_lifetime_min"] - (5 + 400 / 60) / 2) < 0.001
    assert abs(s["time_to_fleet_min"] - 4000 / 60) < 0.001
    assert abs(s["usd_per_gpu_hour"] - 0.33 / 1.0) < 1e-9


SHIPPED = sorted(
    (__import__("pathlib").Path(__file__).resolve().parent.parent / "scenarios").glob("*.toml")
)


@pytest.mark.parametrize("scenario", SHIPPED, ids=lambda p: p.stem)
def test_referee_runs_on_every_shipped_scenario(scenario, tmp_path, capsys):
    out = _referee_json(tmp_path, capsys, scenario, "600")
    assert [r["policy"] for r in out["runs"]] == ["seed", "default"]
    for run in out["runs"]:
        assert (
            out["summary"][run["policy"]]["total_usd"] == run["total_usd"]
        )  # one seed: the median is the run
        assert 0 <= run["dud_usd"] <= run["total_usd"]
    assert out["summary"]["default"]["false_kills"] == 0
