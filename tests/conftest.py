from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hypothesis  # imported now, not by its plugin's end-of-run summary
import pytest
from filelock import FileLock
from rentwatch.engine.hosts.probe_io import parse_probe_output, probe_source
from rentwatch.referee.stepped import stepped_clock
from rentwatch.sim.scenario import parse_scenario
from rentwatch.sim.server import SimServer

from .fuzzing import DEEP
from .team_pg import pg_server, team_db  # noqa: F401  (the team store's PostgreSQL fixtures)

# Why hypothesis is imported above: under CPython 3.11.7, after `test_artifact_pull`'s pull cut
# by its deadline ran after another pull in one process, a later compile failed "AST constructor
# recursion depth mismatch" (an interpreter fault; its cause was not found). Hypothesis's plugin
# imported it lazily at the run's summary, so a run whose tests all passed ended in that
# traceback. Imported here, it is compiled before any test runs.

# the deep pass (tests/fuzzing.py), registered before hypothesis's plugin loads the profile that
# `--hypothesis-profile` names; a property test with no count of its own runs ten times
# hypothesis's default there
hypothesis.settings.register_profile(DEEP, max_examples=1000)


def _compile_once() -> None:
    """Where writing bytecode is off (PYTHONDONTWRITEBYTECODE), every process the suite starts
    (each xdist worker, each CLI, controller and simulator it runs) compiled rentwatch, and
    each worker rewrote every test module, again: about 10 s of CPU per worker and half a
    second per process. Compiled once instead, into a cache outside the source tree
    (PYTHONPYCACHEPREFIX), which the processes started from here inherit."""
    if not sys.dont_write_bytecode:
        return
    from platformdirs import user_cache_dir

    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or str(Path(user_cache_dir("rentwatch")) / "pyc")
    os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


_compile_once()


# The slowest tests, slowest first (`--durations` of a whole run): they start first, so under
# xdist none starts late and runs on alone while the other workers sit idle. With
# `--maxschedchunk 1` (pyproject.toml) each worker takes the next test as it frees, not a block
# of them, so the slowest spread over the workers. An entry without `[...]` covers each of its
# parameters.
SLOWEST_FIRST = (
    "tests/test_memory_campaigns.py::test_the_second_campaign_skips_the_firsts_duds_and_prefers_what_delivered",
    "tests/test_rescue.py::test_a_moved_job_starts_from_the_state_copied_off_its_paused_rental",
    "tests/test_referee_floor.py::test_every_policys_bill_is_at_or_above_its_runs_floor",
    "tests/test_service.py::test_campaign_served_while_it_runs",
    "tests/test_packaging.py::test_the_wheel_installs_and_runs",
    "tests/test_hooks.py::test_each_new_host_behaviour_is_caught_and_no_healthy_host_killed[xid_mid_job]",
    "tests/test_leaks.py::test_a_restart_after_ctrl_c_starts_its_proven_rentals_before_creating",
    "tests/test_service_hour.py::test_an_hour_of_market_time_watched_and_queried_equals_the_truth",
    "tests/test_multi_gpu_bids.py::test_a_bid_campaign_on_two_gpu_machines_rents_them_at_the_machines_bid",
    "tests/test_jobs.py::test_kill_9_mid_jobs_reattaches",
    "tests/test_jobs.py::test_twelve_jobs_on_a_fleet_of_three",
    "tests/test_jobs_cli.py::test_jobs_and_logs_through_the_controller_then_from_the_ledger",
    "tests/test_referee.py::test_referee_runs_on_every_shipped_scenario[bad_day]",
    "tests/test_referee.py::test_kept_logs_hold_each_runs_evidence_and_its_bill_decomposes",
    "tests/test_ledger.py::test_sql_billing_equals_pure_function",
    "tests/test_hooks.py::test_each_new_host_behaviour_is_caught_and_no_healthy_host_killed[slow_net]",
    "tests/test_probes.py::test_real_preflight_on_cpu_passes_the_validator",
    "tests/test_jobs_cli.py::test_a_running_jobs_output_off_its_host_when_no_controller_runs",
    "tests/test_probe_readers.py::test_any_preflight_document_gets_a_verdict",
    "tests/test_exit_trap.py::test_restart_after_kill_9_adopts",
    "tests/test_service.py::test_controller_killed_then_restarted_while_attached",
    "tests/test_referee.py::test_family_runs_every_policy_on_each_market",
    "tests/test_probe_readers.py::test_any_samples_give_a_throttle_reading",
    "tests/test_rules.py::test_properties",
    "tests/test_sim_price_rise.py::test_the_official_cli_lists_accepts_and_rejects",
    "tests/test_hooks.py::test_each_new_host_behaviour_is_caught_and_no_healthy_host_killed[slow_disk]",
    "tests/test_leaks.py::test_ctrl_c_names_its_stopped_rentals_and_the_printed_end_works",
    "tests/test_probe_readers.py::test_any_output_is_a_document_or_a_probe_error",
    "tests/test_service_attach.py::test_demo_runs_its_market_in_the_controller_and_survives_the_dashboard",
    "tests/test_service_attach.py::test_watch_leaves_its_controller_running_then_a_second_dashboard_stops_it",
    "tests/test_ssh_keys.py::test_a_restart_with_a_new_key_attaches_it_to_what_it_adopts",
    "tests/test_referee.py::test_referee_runs_on_every_shipped_scenario[slow_hosts]",
    "tests/test_referee.py::test_referee_runs_on_every_shipped_scenario[throttle_heavy]",
    "tests/test_team_campaigns.py::test_the_second_controller_rents_none_of_the_machines_the_first_found_dead",
    "tests/test_price_engine.py::test_an_increase_dearer_than_a_move_is_rejected_and_the_work_moves",
    "tests/test_referee.py::test_referee_runs_on_every_shipped_scenario[article_24gb]",
    "tests/test_jobs.py::test_second_campaign_learns_from_the_first",
    "tests/test_preview_rents.py::test_plan_prices_the_job_set_from_the_policy_odds_and_the_ledger",
    "tests/test_referee.py::test_referee_runs_on_every_shipped_scenario[article]",
    "tests/test_hooks.py::test_each_new_host_behaviour_is_caught_and_no_healthy_host_killed[short_vram]",
    "tests/test_newcomer_keys.py::test_end_from_the_dashboard_destroys_a_stopped_rental_too",
    "tests/test_jobs.py::test_interrupted_job_resumes_from_its_checkpoint",
    "tests/test_hooks.py::test_each_new_host_behaviour_is_caught_and_no_healthy_host_killed[narrow_pcie]",
    "tests/test_exit_trap.py::test_the_watchdog_arms_on_an_image_that_is_not_vasts[ssh0]",
    "tests/test_preflight_driver.py::test_vram_and_pcie_sections_on_the_fake",
    "tests/test_referee_workers.py::test_a_signalled_referee_ends_its_workers_and_their_hosts[2]",
    "tests/test_exit_trap.py::test_watchdog_stops_verified_hosts_after_kill_9",
    "tests/test_sim_market.py::test_hundred_creates_shares_timings_and_billing",
    "tests/test_service.py::test_an_attached_dashboard_sees_the_campaigns_end",
    "tests/test_referee_workers.py::test_a_signalled_referee_ends_its_workers_and_their_hosts[15]",
    "tests/test_metrics_starve.py::test_a_campaign_finishes_its_jobs_with_250_idle_metrics_connections",
    "tests/test_pictures.py::test_the_spend_curve_ends_at_the_receipts_spend",
    "tests/test_probe_readers.py::test_every_deep_check_reads_any_document",
    "tests/test_hostile_market.py::test_lying_min_bids_place_no_losing_or_absurd_bid_and_leak_nothing",
    "tests/test_referee_workers.py::test_workers_of_a_killed_referee_end_themselves",
    "tests/test_leaks.py::test_a_market_down_exit_names_each_rental_still_billing",
    "tests/test_preview_rents.py::test_on_demand_campaign_rents_what_offers_named_first",
    "tests/test_exit_trap.py::test_the_watchdog_arms_on_an_image_that_is_not_vasts[ssh1]",
    "tests/test_sim_copy.py::test_the_official_cli_asks_a_copy_and_bad_bodies_are_refused",
    "tests/test_hooks.py::test_routes_scheduling_and_build_output_abandon_no_healthy_host",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    last = len(rank)

    def place(item: pytest.Item) -> int:
        return rank.get(item.nodeid, rank.get(item.nodeid.split("[")[0], last))

    items.sort(key=place)  # stable: the rest keep the order they were collected in


def played_once(factory: pytest.TempPathFactory, name: str, play: Callable[[], Any]) -> Any:
    """`play()`'s JSON answer, played once for the whole run: under xdist the first worker to
    ask plays it and keeps the answer where every worker of the run looks (the folder above
    theirs), and a worker that asks meanwhile waits for it. (`xdist_group` cannot do this:
    under pytest 9 xdist's group mark no longer reaches the scheduler.)"""
    root = factory.getbasetemp()
    shared = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    kept = shared / f"played-{name}.json"
    with FileLock(str(kept) + ".lock"):
        if kept.exists():
            return json.loads(kept.read_text())
        kept.write_text(json.dumps(play()))
        return json.loads(kept.read_text())  # the same types for the worker that played it


CPU_PREFLIGHT_NONCE = 424242


def _run_cpu_preflight() -> dict:
    out = subprocess.run(
        [sys.executable, "-", "--device", "cpu", "--n", "256", "--iters", "2"]
        + ["--nonce", str(CPU_PREFLIGHT_NONCE)],
        input=probe_source("preflight"),
        capture_output=True,
        timeout=120,
    )
    return parse_probe_output(out.stdout, "preflight")


@pytest.fixture(scope="session")
def cpu_preflight(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The preflight probe run for real on the CPU, as a host runs it (`python3 -`, nonce
    `CPU_PREFLIGHT_NONCE`), once for the whole run (`played_once`): each run starts Python and
    imports torch, about 3 s of CPU, and the tests that read its document only read it (copy
    it to change it)."""
    pytest.importorskip("torch")
    return played_once(tmp_path_factory, "cpu-preflight", _run_cpu_preflight)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def runtime(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's controllers register in a folder of its own (the registry `rentwatch ls`
    reads), never in the user's: a test run shows no phantom campaign there. Beside the test's
    `tmp_path`, not in it (tests list what their commands wrote there)."""
    d = tmp_path_factory.mktemp("run") / "rentwatch"
    monkeypatch.setenv("RENTWATCH_RUNTIME_DIR", str(d))
    return d


@contextlib.contextmanager
def market_stands(sim: SimServer) -> Iterator[None]:
    """The simulator's clock stands still inside (its market time passes no more), then runs
    on from where it stood: a test's wall-time step (a CLI process starting on a loaded box)
    costs the market nothing, so what the test means happens before the market moves on.

    Its pacing does not stand: a call is paced by the market seconds the clock would have run
    meanwhile (`SimClock.pacing_now`). A controller restarted inside lists more than once
    before it adopts; paced by standing market time, every list after the first, and the
    first too when the killed controller had just listed, was refused with a 429 on each
    retry until the controller gave up. A client that calls with no interval is refused as
    on a running market, so the pacing tests' 429s hold inside a stand too."""
    sim.call(sim.market.clock.stand)
    try:
        yield
    finally:
        sim.call(sim.market.clock.flowing)


@pytest.fixture
def make_sim() -> Iterator:
    servers: list[SimServer] = []

    def make(api_key: str = "test-key", stepped: bool = False, **scenario) -> SimServer:
        """`stepped`: the market's clock moves only when the engine, run in this process on
        it (`tests/campaigns.py` `headless`), waits with nothing out: the test's market time
        does not depend on the box's load (app/referee/stepped.py). Its scale is 1."""
        clock = stepped_clock() if stepped else None
        server = SimServer(parse_scenario(scenario), api_key=api_key, clock=clock)
        server.start_in_thread()
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.stop_thread()


@pytest.fixture
def dashboard(make_sim, tmp_path):
    """Opens the dashboard as `demo` and `watch --foreground` run it, attached to its engine through
    the controller service: `(app, ledger, engine)`. At the test's end the dashboard's client
    leaves and the engine ends, releasing what it holds, before the simulator stops."""
    from rentwatch.core.policy import get_policy
    from rentwatch.market.factory import load_campaign
    from rentwatch.run.dashboard import attach_in_process, make_engine

    from .campaigns import campaign_text

    opened = []

    def open_(sim, fleet=2, policy="default", max_wall_poll=1.0):
        engine = make_engine(
            sim.url,
            sim.api_key,
            load_campaign(campaign_text("tui", fleet)),
            get_policy(policy),
            tmp_path / "l.duckdb",
            tmp_path / "key",
        )
        engine.max_wall_poll = max_wall_poll
        app, finish = attach_in_process(engine)
        opened.append((app, finish))
        return app, engine.session.ledger, engine

    yield open_
    for app, finish in opened:
        app.engine.shutdown("leave")
        finish(app.return_value)
