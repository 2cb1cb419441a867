"""The policy referee: the same markets, the same seeds, several policies, scored from the
simulator's truth (never from the engine's own ledger). One shipped scenario (`--scenario`) or a
family of drawn markets (`--family N`, see app/sim/family.py). Each run has a market-time
deadline, runs go to parallel processes, and the scoring lives in app/referee_score.py.
See docs/referee.md."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.campaign import Campaign, Job
from ..core.errors import ConfigError
from ..core.lifecycle import Phase
from ..core.policy import Policy, get_policy
from ..engine.session import Session
from ..engine.supervisor import Supervisor
from ..ledger import Ledger
from ..sim.family import draw_family
from ..sim.scenario import Scenario
from ..sim.server import SimServer
from .lag import LAG_BOUND_S, summarise_valid
from .pacing import Governor, governed, rerun_if_late, run_held, run_until, timing
from .score import RATIO_KEYS, SCORE_KEYS, RunFacts, score
from .workers import run_all

__all__ = ["SCORE_KEYS", "default_jobs", "format_table", "policy_from_spec", "referee", "score"]

DEFAULT_DEADLINE_MIN = 360.0  # market minutes a run may take before it scores "never"
DEFAULT_JOB_MIN = 30.0  # market minutes each default job computes
JOBS_PER_INSTANCE = 2  # default job set: two jobs per fleet slot (hold and batch pays)


@dataclass(frozen=True)
class Task:
    """One referee run, picklable so it can go to another process."""

    market: int
    scenario: Scenario
    campaign: Campaign
    policy: str
    warm: bool
    deadline_s: float
    keep_logs: str | None = None  # a folder: each run's log, ledger, truth and jobs kept there
    lag_bound_s: float = LAG_BOUND_S  # a run whose lag max passes this is invalid


def referee_campaign() -> Campaign:
    """The campaign refereed when none is given: the demo's terms (image, disk, price ceiling)
    without the demo's own jobs, which are sized in wall seconds for watching the dashboard
    (at the referee's 600x, a 40-second sleep is 400 market minutes: no policy would finish the
    work within the deadline). Each market then gets the default job set, sized to its fleet."""
    from ..core.campaign import parse_campaign
    from ..run.dashboard import DEMO_CAMPAIGN

    text = DEMO_CAMPAIGN.replace('"demo"', '"referee"')
    return replace(parse_campaign(text, "referee campaign"), jobs=())


def default_jobs(
    fleet: int, time_scale: float, job_min: float = DEFAULT_JOB_MIN
) -> tuple[Job, ...]:
    """The referee's job set for a campaign that brings none: JOBS_PER_INSTANCE jobs per fleet
    slot, each computing `job_min` market minutes (a sleep: the sim runs jobs in wall time, so the
    wall length follows the time scale)."""
    wall = max(0.2, job_min * 60 / time_scale)
    run = f'python3 -c "import time; time.sleep({wall:.3f})"'
    return tuple(
        Job(name=f"ref-{i + 1}", run=run, retries=3) for i in range(JOBS_PER_INSTANCE * fleet)
    )


def policy_from_spec(spec: str) -> Policy:
    """A policy by name, optionally with settings after `+` (`default+spare_attempts=2`), so a
    setting can be refereed before it becomes a preset. Values are TOML (`true`, `2`, `0.5`)."""
    name, *settings = spec.split("+")
    overrides: dict[str, Any] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"policy {spec!r}: expected NAME+SETTING=VALUE, got {item!r}")
        try:
            overrides[key.strip()] = tomllib.loads(f"v = {value.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            raise ConfigError(f"policy {spec!r}: {value!r} is not a TOML value") from None
    return get_policy(name.strip()).with_overrides(overrides)


def _facts(sup: Supervisor, start: float, finish: float, ended: str) -> RunFacts:
    """What the policy did that the truth cannot say: what it verified, which jobs it saw end."""
    verified = {
        a.instance_id: at
        for a in sup.attempts.values()
        if (at := a.life.since(Phase.VERIFIED)) is not None
    }
    done_at = tuple(
        (j.instance_id, j.finished_at)
        for j in sup.jobs.jobs
        if j.status == "done" and j.finished_at is not None and j.finished_at <= finish
    )
    return RunFacts(start, finish, sup.campaign.fleet, verified, sup.jobs.total, done_at, ended)


async def _one_run(
    sim: SimServer,
    campaign: Campaign,
    policy_name: str,
    ledger: Ledger,
    key: Path,
    tmp: Path,
    deadline_s: float,
    log: Callable[[str], None],
    lag_bound_s: float = LAG_BOUND_S,
) -> tuple[RunFacts, list[dict[str, Any]], Governor]:
    """Run a campaign to its end or to the market-time deadline, then release what it holds;
    its facts, every job as the policy last saw it (for a kept log), and the governor that
    paced its market (its lag: app/referee/pacing.py)."""
    session = Session.open(
        sim.url,
        sim.api_key,
        ledger,
        campaign,
        policy_from_spec(policy_name).with_overrides(campaign.policy),
        key,
        log=log,
        artifacts_root=tmp / "artifacts",  # a campaign's own artifacts stay in the run's folder
        market_clock=sim.market.clock,  # the engine reads the clock the governor steers
    )
    sup = session.sup
    start = sim.market.clock.now()
    ended, finish = "the run failed before its end", start
    try:
        await session.start()
        async with governed(sim, sup, start, lag_bound_s) as gov:
            try:
                ended, finish = await run_until(
                    run_held(sup, sim.market.clock), sim.market.clock, start + deadline_s
                )
            except Exception as exc:  # an engine error ends this run, scored as far as it got;
                # it must not take the other runs of the referee down with it
                ended = f"engine error: {type(exc).__name__}: {str(exc)[:200]}"
                finish = min(sim.market.clock.now(), start + deadline_s)
        await session.release("rule:campaign_end", "referee: campaign ended")
    finally:
        await session.end(f"referee: run over ({ended})")
    jobs = [
        {
            "job": j.name,
            "status": j.status,
            "instance_id": j.instance_id,
            "attempts": j.attempts,
            "started_at": j.started_at,
            "finished_at": j.finished_at,
        }
        for j in sup.jobs.jobs
    ]
    return _facts(sup, start, finish, ended), jobs, gov


def run_name(task: Task) -> str:
    """The kept log's folder for one run: market, policy (settings made file-safe), seed."""
    policy = re.sub(r"[^A-Za-z0-9._-]+", "_", task.policy)
    return f"m{task.market:02d}-{policy}-s{task.scenario.seed}"


def _keep(
    task: Task, tmp: Path, lines: list[str], truth: dict[str, Any], facts: RunFacts, jobs: Any
) -> None:
    """Save one run's evidence: the engine's log lines, its ledger, the sim's truth at the end
    and the facts scored with it (docs/referee.md, "Kept logs")."""
    assert task.keep_logs is not None
    out = Path(task.keep_logs) / run_name(task)
    out.mkdir(parents=True, exist_ok=True)
    (out / "log.txt").write_text("\n".join(lines) + "\n")
    shutil.copyfile(tmp / "ledger.duckdb", out / "ledger.duckdb")
    run = {
        "policy": task.policy,
        "market": task.market,
        "seed": task.scenario.seed,
        "campaign": task.campaign.name,
        "fleet": task.campaign.fleet,
        "gpu_billing": task.scenario.gpu_billing,
        "start": facts.start,
        "finish": facts.finish,
        "ended": facts.ended,
        "verified_at": {str(k): v for k, v in facts.verified_at.items()},
        "jobs": jobs,
    }
    (out / "run.json").write_text(json.dumps(run, indent=1))
    (out / "truth.json").write_text(json.dumps(truth, indent=1))


def run_task(task: Task) -> dict[str, Any]:
    """One policy on one market, judged for lag: a run the engine could not keep up with is
    run once more at half the time scale, and marked invalid if it still lags
    (docs/referee.md, "Time")."""
    return rerun_if_late(task, _run_task_once, _slower)


def _slower(task: Task) -> Task:
    """The same run at half the time scale (default jobs resized to it)."""
    sc = task.scenario
    slower = replace(sc, time_scale=sc.time_scale / 2)
    camp = task.campaign
    if camp.jobs == default_jobs(camp.fleet, sc.time_scale):
        camp = replace(camp, jobs=default_jobs(camp.fleet, slower.time_scale))
    return replace(task, scenario=slower, campaign=camp)


def _run_task_once(task: Task) -> dict[str, Any]:
    """One policy on one market (its own sim, ledger and key): the scored run."""
    with tempfile.TemporaryDirectory(prefix="rentwatch-referee-") as tmp_s:
        tmp = Path(tmp_s)
        sim = SimServer(task.scenario, api_key="referee").start_in_thread()
        ledger = Ledger(tmp / "ledger.duckdb")
        lines: list[str] = []
        t0 = sim.market.clock.now()

        def keep_line(line: str) -> None:  # stamped with market minutes since the market began
            lines.append(f"{(sim.market.clock.now() - t0) / 60:7.2f}  {line}")

        kept: tuple[dict[str, Any], RunFacts, Any] | None = None
        try:
            result: dict[str, Any] | None = None
            for _ in range(2 if task.warm else 1):
                lines.clear()  # a warm run keeps the scored (second) run's log
                facts, jobs, gov = asyncio.run(
                    _one_run(
                        sim,
                        task.campaign,
                        task.policy,
                        ledger,
                        tmp / "key",
                        tmp,
                        task.deadline_s,
                        keep_line if task.keep_logs else (lambda _: None),
                        task.lag_bound_s,
                    )
                )
                truth = sim.call(sim.market.truth)
                result = score(truth, facts)
                result.update(timing(gov, truth, facts.finish))
                result["ended"] = facts.ended  # why the run stopped (not scored; for reading)
                kept = (truth, facts, jobs)
            assert result is not None
        finally:
            ledger.close()
            sim.stop_thread()
        if task.keep_logs and kept is not None:
            _keep(task, tmp, lines, *kept)
    return {
        "policy": task.policy,
        "seed": task.scenario.seed,
        "warm": task.warm,
        "market": task.market,
        **result,
    }


def _with_jobs(campaign: Campaign, time_scale: float) -> Campaign:
    return (
        campaign
        if campaign.jobs
        else replace(campaign, jobs=default_jobs(campaign.fleet, time_scale))
    )


def plan(
    scenario: Scenario | None,
    campaign: Campaign,
    policies: list[str],
    seeds: int,
    warm: bool = False,
    time_scale: float | None = None,
    family: int = 0,
    family_seed: int = 1,
    deadline_min: float = DEFAULT_DEADLINE_MIN,
) -> list[Task]:
    """Every run the referee will make, in report order (market, seed, policy)."""
    if (
        seeds < 1
        or family < 0
        or not deadline_min > 0
        or (time_scale is not None and time_scale <= 0)
    ):
        raise ConfigError("referee: seeds >= 1, family >= 0, deadline and time scale above 0")
    if not policies:
        raise ConfigError("referee: name at least one policy")
    for name in policies:
        policy_from_spec(name)  # refuse a bad name before any market starts
    tasks: list[Task] = []
    deadline_s = deadline_min * 60
    if family:
        for m in draw_family(family_seed, family):
            camp = replace(
                campaign,
                fleet=m.fleet,
                max_creates=max(campaign.max_creates, 12 * m.fleet),
                max_dph=max(campaign.max_dph, m.max_dph),
                budget_usd=max(campaign.budget_usd, 5.0 * m.fleet),
            )
            for k in range(seeds):
                sc = replace(m.scenario, seed=m.scenario.seed + k, time_scale=time_scale or 600.0)
                camp_k = _with_jobs(camp, sc.time_scale)  # default jobs sized to this fleet
                tasks += [Task(m.index, sc, camp_k, p, warm, deadline_s) for p in policies]
        return tasks
    assert scenario is not None
    for k in range(seeds):
        sc = replace(scenario, seed=scenario.seed + k, time_scale=time_scale or scenario.time_scale)
        camp = _with_jobs(campaign, sc.time_scale)
        tasks += [Task(0, sc, camp, p, warm, deadline_s) for p in policies]
    return tasks


def run_tasks(tasks: list[Task], workers: int | None = None) -> list[dict[str, Any]]:
    """Every run, in `workers` processes (1: here, one after another); results in task order."""
    return run_all(run_task, tasks, workers or min(len(tasks), os.cpu_count() or 1))


def referee(
    scenario: Scenario | None,
    campaign: Campaign,
    policies: list[str],
    seeds: int,
    warm: bool = False,
    time_scale: float | None = None,
    family: int = 0,
    family_seed: int = 1,
    deadline_min: float = DEFAULT_DEADLINE_MIN,
    workers: int | None = None,
    keep_logs: str | None = None,
    lag_bound_s: float = LAG_BOUND_S,
) -> dict[str, Any]:
    """Run every policy on every market and seed; the referee's JSON (docs/referee.md).
    `keep_logs`: a folder where each run's log, ledger and truth are kept; `lag_bound_s`:
    the lag past which a run is rerun slower, then invalid."""
    tasks = plan(
        scenario, campaign, policies, seeds, warm, time_scale, family, family_seed, deadline_min
    )
    tasks = [replace(t, lag_bound_s=lag_bound_s) for t in tasks]
    if keep_logs:
        Path(keep_logs).mkdir(parents=True, exist_ok=True)
        tasks = [replace(t, keep_logs=str(Path(keep_logs).resolve())) for t in tasks]
    runs = run_tasks(tasks, workers)
    name = f"family:{family_seed}:{family}" if family else (scenario.name if scenario else "")
    return {"scenario": name, "runs": runs, "summary": summarise_valid(runs, policies)}


def _fmt(v: Any, fmt: str, never: str = "never") -> str:
    return never if v is None else f"{v:{fmt}}"


def format_table(result: dict[str, Any]) -> str:
    markets = len({r["market"] for r in result["runs"]})
    lines = [
        f"referee: {result['scenario']}, {markets} market(s), {len(result['runs'])} run(s); "
        "medians over runs (never = not within the deadline)"
    ]
    lines.append(
        f"{'policy':8} {'total $':>8} {'to done min':>11} {'dud $':>7} {'duds':>5} "
        f"{'dud life':>8} {'false kills':>11} {'to fleet min':>12} {'$/GPU-h':>8} "
        f"{'$ vs seed':>9} {'done vs':>8} {'dud$ vs':>8} {'fleet vs':>8}"
    )
    for policy, s in result["summary"].items():

        def x(key: str, s: dict[str, Any] = s) -> str:
            return _fmt(s.get(key), ".2f", "-") + ("x" if s.get(key) is not None else "")

        lines.append(
            f"{policy:8} {_fmt(s['total_usd'], '.3f'):>8} {_fmt(s['time_to_done_min'], '.0f'):>11} "
            f"{_fmt(s['dud_usd'], '.3f'):>7} {_fmt(s['duds'], '.0f'):>5} "
            f"{_fmt(s['dud_mean_lifetime_min'], '.1f'):>8} {_fmt(s['false_kills'], '.0f'):>11} "
            f"{_fmt(s['time_to_fleet_min'], '.0f'):>12} {_fmt(s['usd_per_gpu_hour'], '.3f'):>8} "
            f"{x('total_usd_vs_seed'):>9} {x('time_to_done_vs_seed'):>8} "
            f"{x('dud_usd_vs_seed'):>8} {x('time_to_fleet_vs_seed'):>8}"
        )
    for policy, s in result["summary"].items():
        w = s.get("worst_market")
        if policy != "seed" and w is not None and markets > 1:

            def shown(k: str, w: dict[str, Any] = w) -> str:
                if w[k] is not None:
                    return f"{w[k]:.2f}x"
                return "never" if RATIO_KEYS[k] in w.get("never", ()) else "-"

            ratios = ", ".join(
                f"{k.removesuffix('_vs_seed')} {shown(k)}"
                for k in ("total_usd_vs_seed", "time_to_done_vs_seed", "dud_usd_vs_seed")
            )
            lines.append(f"{policy}: worst market {w['market']} against seed: {ratios}")
    return "\n".join(lines)
