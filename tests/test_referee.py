"""The referee: its table's sums come from the sim's truth, whatever the scenario; delivery is
the truth's, not the policy's belief; runs are bounded by a market-time deadline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rentwatch.cli.main import main
from rentwatch.core.lifecycle import Phase
from rentwatch.market.factory import load_campaign
from rentwatch.referee.run import referee
from rentwatch.referee.score import RunFacts, score
from rentwatch.sim.scenario import parse_scenario

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
# One short job: the run ends soon after the fleet delivers (fast tests).
SHORT_JOB = '\n[[jobs]]\nname = "j"\nrun = "true"\n'
SIZED_JOBS = "".join(
    f'\n[[jobs]]\nname = "r{i}"\nrun = "true"\nretries = 3\nref_gpu = "RTX 4090"\nref_hours = 0.1\n'
    for i in (1, 2)
)

RUN_KEYS = {
    "policy",
    "seed",
    "warm",
    "market",
    "dud_usd",
    "duds",
    "dud_mean_lifetime_min",
    "false_kills",
    "time_to_fleet_min",
    "time_to_done_min",
    "jobs_finished",
    "total_usd",
    "usd_per_gpu_hour",
    "floor_usd",
    "vs_floor",
}
RATIOS = {
    "dud_usd_vs_seed",
    "time_to_fleet_vs_seed",
    "time_to_done_vs_seed",
    "total_usd_vs_seed",
    "vs_floor",
}


def _referee_json(tmp_path, capsys, *more: str, campaign: str = CAMPAIGN + SHORT_JOB) -> dict:
    camp = tmp_path / "c.toml"
    camp.write_text(campaign)
    # in this process: the worker processes have tests of their own (test_referee_workers.py),
    # and each would start Python and import the referee again
    args = ["referee", "--campaign", str(camp), "--policies", "seed,default", "--json"]
    args += ["--workers", "1", *more]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def _row(iid, behaviour, created, running=None, destroyed=None, stopped=None, usd=0.0):
    return {
        "id": iid,
        "behaviour": behaviour,
        "created_at": created,
        "running_at": running,
        "destroyed_at": destroyed,
        "stopped_at": stopped,
        "total_usd": usd,
    }


def test_referee_json_against_truth(tmp_path, capsys):
    scen = tmp_path / "s.toml"
    scen.write_text(
        'seed = 3\noffers = 12\n[[host_class]]\nbehaviour = "healthy"\nshare = 0.5\n'
        '[[host_class]]\nbehaviour = "fatal_pull"\nshare = 0.5\nfatal_at_min = [0.5, 1.0]\n'
    )
    out = _referee_json(tmp_path, capsys, "--scenario", str(scen), "--seeds", "1")
    assert set(out) == {"scenario", "runs", "summary"}
    for run in out["runs"]:
        assert set(run) >= RUN_KEYS
        assert run["market"] == 0
        assert run["false_kills"] == 0
        assert run["total_usd"] >= run["dud_usd"] >= 0
        # half the market delivers: both policies get their fleet and finish the one job
        assert run["time_to_fleet_min"] is not None and run["time_to_fleet_min"] > 0
        assert run["time_to_done_min"] >= run["time_to_fleet_min"]
        assert run["jobs_finished"] == 1
        assert run["usd_per_gpu_hour"] > 0
        # a job of unknown length: the floor is one boot, under every bill
        assert run["total_usd"] >= run["floor_usd"] > 0
    for s in out["summary"].values():
        assert set(s) >= RATIOS
    assert out["summary"]["seed"]["total_usd_vs_seed"] == 1.0


def _verified(at: dict[int, float]) -> dict[int, tuple[tuple[float, Phase], ...]]:
    """Phase moves in which the policy verified each instance at the given market time."""
    return {iid: ((t, Phase.VERIFIED),) for iid, t in at.items()}


def test_score_sums():
    truth = {
        "now": 10_000.0,
        "instances": [
            _row(1, "fatal_pull", 0.0, destroyed=300.0, usd=0.02),
            _row(2, "healthy", 0.0, running=600.0, stopped=4200.0, usd=0.30),
            _row(3, "healthy", 100.0, destroyed=500.0, usd=0.01),
            _row(4, "healthy", -50.0, running=1.0, usd=9.0),  # an earlier run's: not scored
        ],
    }
    s = score(truth, RunFacts(start=0.0, finish=4000.0, fleet=1, moves=_verified({2: 900.0})))
    assert s["duds"] == 2 and abs(s["dud_usd"] - 0.03) < 1e-9
    assert s["false_kills"] == 1  # a healthy machine destroyed before the end
    assert abs(s["dud_mean_lifetime_min"] - (5 + 400 / 60) / 2) < 0.001
    assert abs(s["time_to_fleet_min"] - 900 / 60) < 0.001  # when the policy verified #2
    assert abs(s["usd_per_gpu_hour"] - 0.33 / 1.0) < 1e-9
    assert s["time_to_done_min"] is None  # no jobs: nothing to finish


def test_a_fleet_of_duds_never_delivers():
    """What `naive` does: trusts `running` on hosts that cannot compute. Its fleet is never."""
    truth = {
        "now": 5000.0,
        "instances": [
            _row(1, "stale_driver", 0.0, running=300.0, stopped=3000.0, usd=0.2),
            _row(2, "misreported", 0.0, running=400.0, stopped=3000.0, usd=0.2),
        ],
    }
    verified = _verified({1: 310.0, 2: 410.0})
    facts = RunFacts(0.0, 3000.0, 2, verified, jobs_total=2, jobs_done={("a", 1): 900.0})
    s = score(truth, facts)
    assert s["time_to_fleet_min"] is None
    assert s["usd_per_gpu_hour"] is None  # nothing delivered: not 0.0, which would read best
    assert s["time_to_done_min"] is None and s["jobs_finished"] == 0  # work on a dud is none
    assert s["dud_usd"] == s["total_usd"] == 0.4


def test_time_to_fleet_needs_fleet_delivering_instances_held_at_once():
    rows = [
        _row(1, "healthy", 0.0, running=600.0, usd=0.1),
        _row(2, "slow_pull", 0.0, running=1500.0, usd=0.1),
        # verified, then stopped by the policy before #1 was verified: not held at once
        _row(3, "throttled", 0.0, running=500.0, stopped=640.0, usd=0.1),
        _row(4, "stale_driver", 0.0, running=200.0, usd=0.1),
        _row(5, "healthy", 0.0, running=300.0, usd=0.1),  # delivering, never verified: not kept
    ]
    truth = {"now": 9000.0, "instances": rows}
    verified = _verified({1: 650.0, 2: 1600.0, 3: 550.0, 4: 250.0})
    s = score(truth, RunFacts(0.0, 8000.0, 2, verified, jobs_total=1, jobs_done={("a", 2): 2400.0}))
    assert abs(s["time_to_fleet_min"] - 1600 / 60) < 1e-3
    assert abs(s["time_to_done_min"] - 2400 / 60) < 1e-3 and s["jobs_finished"] == 1
    s3 = score(truth, RunFacts(0.0, 8000.0, 3, verified))
    assert s3["time_to_fleet_min"] is None  # never three at once


def test_destroying_a_host_that_had_already_gone_dark_is_no_false_kill():
    dropped = _row(1, "offline_midrun", 0.0, running=300.0, destroyed=2000.0, usd=0.1)
    dropped["offline_at"] = 1800.0  # dark before the policy let it go: nothing left to kill
    live = _row(2, "offline_midrun", 0.0, running=300.0, destroyed=1000.0, usd=0.05)
    live["offline_at"] = 1800.0  # still computing when it was destroyed
    truth = {"now": 5000.0, "instances": [dropped, live]}
    s = score(truth, RunFacts(0.0, 4000.0, 2, _verified({1: 400.0, 2: 400.0})))
    assert s["false_kills"] == 1
    # it delivered GPU time only until it went dark: (1800 - 300) + (1000 - 300) seconds
    assert abs(s["usd_per_gpu_hour"] - 0.15 / (2200 / 3600)) < 1e-3


def test_destroying_a_rental_the_market_had_stopped_is_no_false_kill():
    """An outbid while it booted, then destroyed (nothing on it to keep): the market ended
    it. One outbid and resumed before the destroy was running again: that one counts."""
    paused = _row(1, "healthy", 0.0, destroyed=900.0, usd=0.02)
    paused["outbid_at"] = [600.0]
    resumed = _row(2, "healthy", 0.0, running=300.0, destroyed=2000.0, usd=0.1)
    resumed["outbid_at"], resumed["resumed_at"] = [600.0], [700.0]
    ended = _row(3, "healthy", 0.0, running=300.0, destroyed=1500.0, usd=0.1)
    ended["market_stopped_at"] = 1400.0  # its contract's end
    truth = {"now": 5000.0, "instances": [paused, resumed, ended]}
    s = score(truth, RunFacts(0.0, 4000.0, 2, _verified({2: 400.0, 3: 400.0})))
    assert s["false_kills"] == 1
    # created stopped, its bid under min_bid, and destroyed before it ever ran (dstack #4036)
    lost = _row(4, "healthy", 0.0, destroyed=10.0, usd=0.0001)
    lost["bid_lost_at"] = [0.0]
    truth = {"now": 5000.0, "instances": [paused, resumed, ended, lost]}
    assert (
        score(truth, RunFacts(0.0, 4000.0, 2, _verified({2: 400.0, 3: 400.0})))["false_kills"] == 1
    )


def test_summary_counts_never_as_worst_and_names_the_worst_market():
    from rentwatch.referee.score import summarise

    def run(policy, market, usd, done):
        return {
            "policy": policy,
            "market": market,
            "seed": 1,
            "warm": False,
            "dud_usd": usd / 2,
            "duds": 1,
            "dud_mean_lifetime_min": 1.0,
            "false_kills": 0,
            "time_to_fleet_min": done,
            "time_to_done_min": done,
            "jobs_finished": 1,
            "total_usd": usd,
            "usd_per_gpu_hour": None if done is None else usd,
        }

    runs = [
        run("seed", 0, 1.0, 100.0),
        run("seed", 1, 2.0, 200.0),
        run("seed", 2, 3.0, 300.0),
        run("default", 0, 0.5, 50.0),
        run("default", 1, 1.0, 100.0),
        run("default", 2, 1.5, None),  # never finished on market 2
        run("naive", 0, 1.0, None),
        run("naive", 1, 1.0, None),
        run("naive", 2, 1.0, 10.0),
    ]
    s = summarise(runs, ["seed", "default", "naive"])
    assert s["default"]["time_to_done_min"] == 100.0  # median of 50, 100, never
    assert s["naive"]["time_to_done_min"] is None  # two of three never: the median is never
    assert s["default"]["total_usd_vs_seed"] == 0.5
    assert s["default"]["time_to_done_vs_seed"] == 0.5
    assert s["naive"]["time_to_done_vs_seed"] is None
    assert s["default"]["worst_market"]["market"] == 2
    assert [m["total_usd_vs_seed"] for m in s["default"]["per_market"]] == [0.5, 0.5, 0.5]
    assert s["default"]["per_market"][2]["never"] == ["time_to_fleet_min", "time_to_done_min"]
    # naive finished only where seed... did too; where it alone never did, that market is worst
    assert s["naive"]["worst_market"]["market"] in (0, 1)
    # default finishing where seed never did, at three times the money, is not its worst market
    runs += [run("seed", 3, 1.0, None), run("default", 3, 3.0, 500.0)]
    s = summarise(runs, ["seed", "default"])
    assert s["default"]["per_market"][3]["seed_never"] == ["time_to_fleet_min", "time_to_done_min"]
    assert s["default"]["worst_market"]["market"] == 2


def test_a_run_that_cannot_finish_scores_never_within_its_deadline(tmp_path):
    """A market where nothing delivers: every policy runs out of market time, none hangs."""
    scen = parse_scenario(
        {
            "seed": 5,
            "offers": 20,
            "host_class": [{"behaviour": "freeze_pull", "share": 1.0, "pull_min": [30, 40]}],
        }
    )
    camp = load_campaign(CAMPAIGN.replace("max_creates = 12", "max_creates = 500"))
    out = referee(scen, camp, ["naive", "seed"], 1, deadline_min=20, workers=1)
    for run in out["runs"]:  # ended by the market-time deadline, not by running out of work
        assert run["ended"] == "referee: the market-time deadline passed"
        assert run["time_to_fleet_min"] is None and run["time_to_done_min"] is None
        assert run["usd_per_gpu_hour"] is None and run["jobs_finished"] == 0
        assert run["dud_usd"] == run["total_usd"]
    assert out["summary"]["naive"]["time_to_done_vs_seed"] is None


def test_family_runs_every_policy_on_each_market(tmp_path, capsys):
    out = _referee_json(
        tmp_path, capsys, "--family", "2", "--family-seed", "7", "--deadline-min", "60"
    )
    assert out["scenario"] == "family:7:2"
    assert [(r["market"], r["policy"]) for r in out["runs"]] == [
        (0, "seed"),
        (0, "default"),
        (1, "seed"),
        (1, "default"),
    ]
    for run in out["runs"]:
        assert set(run) >= RUN_KEYS
    per_market = out["summary"]["default"]["per_market"]
    assert [m["market"] for m in per_market] == [0, 1]
    assert out["summary"]["default"]["worst_market"]["market"] in (0, 1)


SHIPPED = sorted((Path(__file__).resolve().parent.parent / "scenarios").glob("*.toml"))


@pytest.mark.parametrize("scenario", SHIPPED, ids=lambda p: p.stem)
def test_referee_runs_on_every_shipped_scenario(scenario, tmp_path, capsys):
    out = _referee_json(
        tmp_path, capsys, "--scenario", str(scenario), "--seeds", "1", "--deadline-min", "120"
    )
    assert [r["policy"] for r in out["runs"]] == ["seed", "default"]
    for run in out["runs"]:
        assert (
            out["summary"][run["policy"]]["total_usd"] == run["total_usd"]
        )  # one seed: the median is the run
        assert 0 <= run["dud_usd"] <= run["total_usd"]
    assert out["summary"]["default"]["false_kills"] == 0


def test_a_policy_setting_can_be_refereed_before_it_is_a_preset():
    from rentwatch.core.errors import ConfigError
    from rentwatch.referee.run import policy_from_spec

    p = policy_from_spec("default+spare_attempts=2+reuse_stopped=false")
    assert p.name == "default" and p.spare_attempts == 2 and p.reuse_stopped is False
    assert policy_from_spec("seed").freeze_window_s == 360.0
    with pytest.raises(ConfigError):
        policy_from_spec("default+no_such_setting=1")
    with pytest.raises(ConfigError):
        policy_from_spec("default+spare_attempts")


@pytest.mark.parametrize(
    "args", [["--family", "-1"], ["--deadline-min", "0"], ["--seeds", "0"], ["--policies", "bogus"]]
)
def test_bad_referee_arguments_are_refused_before_any_market_starts(args, capsys):
    try:
        code = main(["referee", *args])
    except SystemExit as exc:  # a usage error, refused by argparse
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    # one clear line: ours ("rentwatch: ..."), or argparse's ("rentwatch referee: error: ...")
    assert "rentwatch:" in err or "rentwatch referee: error:" in err


def test_naive_on_a_market_of_duds_is_scored_as_never_delivering(tmp_path, capsys):
    """`naive` trusts `running`: here every host runs and none computes. Its believed fleet is
    no delivery, and nothing it paid bought a GPU-hour."""
    scen = tmp_path / "duds.toml"
    scen.write_text(
        'seed = 4\noffers = 20\n[[host_class]]\nbehaviour = "stale_driver"\nshare = 0.7\n'
        '[[host_class]]\nbehaviour = "misreported"\nshare = 0.3\n'
    )
    camp = tmp_path / "c.toml"
    camp.write_text(CAMPAIGN)
    args = ["referee", "--scenario", str(scen), "--campaign", str(camp), "--policies", "naive"]
    assert main([*args, "--seeds", "1", "--deadline-min", "30", "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["total_usd"] > 0 and run["dud_usd"] == run["total_usd"]
    assert run["time_to_fleet_min"] is None and run["usd_per_gpu_hour"] is None
    assert run["time_to_done_min"] is None and run["jobs_finished"] == 0


def test_the_referee_campaign_carries_the_default_jobs_sized_in_market_time():
    """The demo's own jobs are wall-clock sleeps for the dashboard; a job that sleeps in wall
    time would end at a market time that depends on the box. Every market of a family gets two
    jobs per fleet slot, each sized to 30 market minutes on a healthy RTX 4090, which the
    simulated host meters in market time."""
    from rentwatch.referee.campaigns import referee_campaign
    from rentwatch.referee.run import plan

    camp = referee_campaign()
    assert camp.jobs == ()
    tasks = plan(None, camp, ["seed"], 1, family=3, family_seed=1)
    for t in tasks:
        assert len(t.campaign.jobs) == 2 * t.campaign.fleet
        for job in t.campaign.jobs:
            assert (job.ref_gpu, job.ref_hours) == ("RTX 4090", 0.5)
            assert "sleep" not in job.run


def test_kept_logs_hold_each_runs_evidence_and_its_bill_decomposes(tmp_path):
    """`--keep-logs DIR`: per run the engine's log, its ledger, its jobs and the sim's truth,
    enough to split the bill into work, duds, idle and storage (bench/referee_costs.py)."""
    from bench.referee_costs import PARTS, decompose

    scen = parse_scenario({"seed": 3, "offers": 20, "time_scale": 600})
    # two sized jobs of 6 market minutes: the run ends once they are done (97 market minutes),
    # where the referee's default two of 30 ran on to the deadline
    camp = load_campaign(CAMPAIGN + SIZED_JOBS)
    keep = tmp_path / "kept"
    out = referee(scen, camp, ["seed"], 1, deadline_min=240, workers=1, keep_logs=str(keep))
    [run] = out["runs"]
    [folder] = list(keep.iterdir())
    assert folder.name == f"m00-seed-s{scen.seed}"
    for name in ("log.txt", "ledger.duckdb", "run.json", "truth.json"):
        assert (folder / name).stat().st_size > 0
    assert "create i:" in (folder / "log.txt").read_text()
    parts = decompose(folder)
    assert parts["total"] == pytest.approx(run["total_usd"], abs=1e-5)
    assert sum(parts[k] for k in PARTS) == pytest.approx(run["total_usd"], abs=1e-3)
    if run["jobs_finished"]:
        assert parts["work"] > 0
