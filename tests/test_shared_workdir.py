"""Jobs that share a workdir on one host share its folders: the later job's `out/` still holds
what the earlier one wrote there. Each job's pull takes only the files written since it
started on that host (its start mark, on the host's clock), and the ledger says what it left."""

from __future__ import annotations

from rentwatch.ledger import Ledger

from .campaigns import run_campaign

# image pulls of 1-3 market minutes, not the default 6-16 (the boot is not what is tested here)
QUICK_4090 = {"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "pull_min": [1, 3]}

# the first job outlives its file by two seconds, so the second starts in a later second
TWO_JOBS = """
[[jobs]]
name = "first"
run = "mkdir -p out && echo first > out/first.txt && sleep 2"
artifacts = ["out/"]

[[jobs]]
name = "second"
run = "mkdir -p out && echo second > out/second.txt"
artifacts = ["out/"]
"""


def test_a_job_pulls_its_own_files_not_those_an_earlier_job_left(make_sim, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sim = make_sim(
        seed=3,
        offers=12,
        time_scale=120,
        host_class=[QUICK_4090],
    )
    code, ledger = run_campaign(sim, tmp_path, "default", name="share", fleet=1, extra=TWO_JOBS)
    assert code == 0
    led = Ledger(ledger)
    ran_on = {e.detail["job"]: e.instance_id for e in led.events(where="kind = 'job_started'")}
    assert ran_on["first"] == ran_on["second"]  # one host ran both, one workdir
    root = tmp_path / "artifacts" / "share"
    assert sorted(p.name for p in (root / "first" / "out").iterdir()) == ["first.txt"]
    assert sorted(p.name for p in (root / "second" / "out").iterdir()) == ["second.txt"]
    [pull] = [
        e for e in led.events(where="kind = 'artifacts' AND ok") if e.detail["job"] == "second"
    ]
    left = [f for f in pull.detail["files"] if "error" in f]
    assert left == [
        {"path": "out/first.txt", "error": "unchanged since the job started here: not its output"}
    ]


def test_a_job_without_artifacts_is_not_listed_as_output_left_on_its_host(
    make_sim, tmp_path, monkeypatch
):
    # `rentwatch end` and the dashboard's end dialog said "outputs NOT pulled off" for every
    # job that declared none (the demo's): its start now says it has nothing to pull
    from rentwatch.cli.end import holdings

    monkeypatch.chdir(tmp_path)  # its artifacts folder is the working directory's
    sim = make_sim(
        seed=3, offers=8, time_scale=300, host_class=[{"behaviour": "healthy", "share": 1.0}]
    )
    jobs = '[[jobs]]\nname = "plain"\nrun = "true"\n'
    jobs += '[[jobs]]\nname = "kept"\nrun = "mkdir -p out && date > out/x"\nartifacts = ["out/"]\n'
    code, ledger = run_campaign(sim, tmp_path, "default", name="none", fleet=1, extra=jobs)
    assert code == 0
    held = holdings(ledger, "none")
    assert held and all(h.unpulled == "" for h in held), [h.line() for h in held]


def test_what_a_job_left_running_stops_when_it_ends(make_sim, tmp_path, monkeypatch):
    # an outsider's pass: j1's background child went on after j1 exited and wrote into the
    # folder j2 shared, and j2's pull took the file as its own (a leftover could as well hold
    # GPU memory the next job needs). The job's process group is stopped at its end. The
    # child writes once j2 has begun (its `go`), and j2 ends once the file is there (or a few
    # seconds on): no fixed sleep for a loaded box to outrun
    monkeypatch.chdir(tmp_path)
    sim = make_sim(
        seed=3,
        offers=12,
        time_scale=120,
        host_class=[QUICK_4090],
    )
    jobs = """
[[jobs]]
name = "j1"
run = "mkdir -p out; (for i in $(seq 300); do [ -e go ] && break; sleep 0.1; done; echo late > out/late.txt) & echo one > out/one.txt"
artifacts = ["out/"]

[[jobs]]
name = "j2"
run = "touch go; for i in $(seq 30); do [ -e out/late.txt ] && break; sleep 0.1; done; echo two > out/two.txt"
artifacts = ["out/"]
"""
    code, ledger = run_campaign(sim, tmp_path, "default", name="left", fleet=1, extra=jobs)
    assert code == 0
    led = Ledger(ledger)
    ran_on = {e.detail["job"]: e.instance_id for e in led.events(where="kind = 'job_started'")}
    assert sim.ssh is not None
    home = sim.ssh.sandbox(sim.market.instances[ran_on["j1"]])
    assert (home / "out" / "one.txt").exists() and not (home / "out" / "late.txt").exists()
    got = {p.name for p in (tmp_path / "artifacts" / "left" / "j2" / "out").iterdir()}
    assert "late.txt" not in got and "two.txt" in got
