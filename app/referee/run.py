"""The policy referee: the same markets and seeds under several policies, scored from the
simulator's truth, never the engine's own ledger, runs in parallel processes (docs/referee.md)."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.bidding.tier import eligible
from ..core.campaign import Campaign
from ..core.errors import ConfigError
from ..core.policy import Policy, get_policy
from ..engine.ending import end_campaign
from ..engine.session import Session
from ..ledger import Ledger
from ..sim.family import draw_family
from ..sim.market import SimMarket
from ..sim.scenario import Scenario
from ..sim.server import SimServer
from .campaigns import warmup_campaign, with_jobs
from .floor import delivered, floor, rentables
from .lag import LAG_BOUND_S, timing
from .pacing import facts_of, run_until
from .score import RunFacts, delivers, ratio, score, summarise
from .stepped import ID_BASE, run_stepped, stepped_clock
from .workers import run_all

DEFAULT_DEADLINE_MIN = 360.0  # market minutes a run may take before it scores "never"


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
    max_pace: float | None = None  # market seconds per wall second at most (None: no cap)


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


async def _one_run(
    sim: SimServer,
    task: Task,
    campaign: Campaign,
    ledger: Ledger,
    tmp: Path,
    log: Callable[[str], None],
    destroy_after: bool = False,
    box_clock: Callable[[], float] = time.monotonic,  # the box's own clock: the pace figure only
) -> tuple[RunFacts, list[dict[str, Any]], float]:
    """Run a campaign to its end or its market-time deadline, then release what it holds
    (`destroy_after`: destroy it all, so nothing bills storage before the next campaign); its
    facts at its end, its jobs as the policy saw them, and its market seconds per wall second.
    Runs on the stepped loop."""
    session = Session.open(
        sim.url,
        sim.api_key,
        ledger,
        campaign,
        policy_from_spec(task.policy).with_overrides(campaign.policy),
        tmp / "key",
        log=log,
        artifacts_root=tmp / "artifacts",  # a campaign's own artifacts stay in the run's folder
        market_clock=sim.market.clock,  # the engine reads and holds the stepped clock
    )
    sup = session.sup
    start = sim.market.clock.now()
    ended = "the run failed before its end"
    try:
        await session.start()
        deadline, wall0 = start + task.deadline_s, box_clock()
        try:
            ended, finish = await run_until(sup.run(), sim.market.clock, deadline)
        except Exception as exc:  # an engine error ends this run, scored as far as it got;
            # it must not take the other runs of the referee down with it
            ended = f"engine error: {type(exc).__name__}: {str(exc)[:200]}"
            finish = min(sim.market.clock.now(), deadline)
        facts = facts_of(sup, start, finish, ended)
        wall = max(box_clock() - wall0, 1e-9)
        pace = round((sim.market.clock.now() - start) / wall, 1)
        if destroy_after:
            await end_campaign(sup, True, sup.campaign.name)
        else:
            await session.release("rule:campaign_end", "referee: campaign ended")
    finally:
        await session.end(f"referee: run over ({ended})")
    keys = ("status", "instance_id", "attempts", "started_at", "finished_at")
    jobs = [{"job": j.name, **{k: getattr(j, k) for k in keys}} for j in sup.jobs.jobs]
    return facts, jobs, pace


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


def scored(
    task: Task, market: SimMarket, truth: dict[str, Any], facts: RunFacts, warm: bool
) -> dict[str, Any]:
    """One campaign's figures: its score from the truth, why it ended, and its floor."""
    result = {
        "policy": task.policy,
        "seed": task.scenario.seed,
        "warm": warm,
        "market": task.market,
        **score(truth, facts),
        "ended": facts.ended,  # why the run stopped (not scored; for reading)
    }
    rows = [r for r in truth["instances"] if r["created_at"] >= facts.start - 1e-6]
    good = {int(r["id"]) for r in rows if delivers(r)}
    camp = task.campaign
    sized = any(j.ref_hours for j in camp.jobs)
    unsized = 0 if sized else result["jobs_finished"]
    work = delivered(truth, good, facts.start, facts.finish, camp, unsized)
    tier = camp.rental != "on-demand" and any(eligible(j) for j in camp.jobs)
    hi = facts.start + task.deadline_s
    machines = rentables(
        market.machines + market.others, task.scenario, camp, facts.start, hi, tier
    )
    f = floor(machines, work, task.scenario.gpu_billing)
    result["floor_usd"] = round(f.usd, 6)
    result["vs_floor"] = ratio(result["total_usd"], f.usd)
    result["floor"] = f.json()
    return result


# one campaign played: its figures, its facts, its jobs as the policy saw them, the sim's truth
Played = tuple[dict[str, Any], RunFacts, list[dict[str, Any]], dict[str, Any]]


def run_task(task: Task) -> dict[str, Any]:
    """One policy on one market (its own sim, ledger and key), on the stepped clock. Warm: an
    earlier campaign runs first on the same market and ledger, its figures under `warmup`."""
    with tempfile.TemporaryDirectory(prefix="rentwatch-referee-") as tmp_s:
        tmp = Path(tmp_s)
        clock = stepped_clock()
        sim = SimServer(task.scenario, api_key="referee", clock=clock, id_base=ID_BASE)
        sim.start_in_thread()
        random.seed(run_name(task))  # the client's retry jitter: the same run, the same waits
        ledger = Ledger(tmp / "ledger.duckdb")
        lines: list[str] = []
        t0 = sim.market.clock.now()

        def keep_line(line: str) -> None:  # stamped with market minutes since the market began
            lines.append(f"{(sim.market.clock.now() - t0) / 60:7.2f}  {line}")

        log = keep_line if task.keep_logs else (lambda _: None)

        def play(campaign: Campaign, warm: bool, destroy_after: bool = False) -> Played:
            main = _one_run(sim, task, campaign, ledger, tmp, log, destroy_after)
            facts, jobs, pace = run_stepped(sim, main, max_pace=task.max_pace)
            truth = sim.call(sim.market.truth)
            result = scored(replace(task, campaign=campaign), sim.market, truth, facts, warm)
            lag = timing(facts, truth, task.lag_bound_s, pace)
            return {**result, **lag}, facts, jobs, truth

        warmup: dict[str, Any] | None = None
        try:
            if task.warm:
                warmup, *_ = play(warmup_campaign(task.campaign), False, destroy_after=True)
                lines.clear()  # the kept log is the scored campaign's
            result, facts, jobs, truth = play(task.campaign, task.warm)
            if warmup is not None and not warmup["valid"] and result["valid"]:
                result["valid"], result["why"] = False, f"its warm-up: {warmup.get('why')}"
        finally:
            ledger.close()
            sim.stop_thread()
        if task.keep_logs:
            _keep(task, tmp, lines, truth, facts, jobs)
    if warmup is not None:
        result["warmup"] = warmup
    return result


def plan(
    scenario: Scenario | None,
    campaign: Campaign,
    policies: list[str],
    seeds: int,
    warm: bool = False,
    family: int = 0,
    family_seed: int = 1,
    deadline_min: float = DEFAULT_DEADLINE_MIN,
    **task_kw: Any,
) -> list[Task]:
    """Every run the referee will make, in report order (market, seed, policy); `task_kw`: the
    runs' `Task` settings (`keep_logs`, `lag_bound_s`, `max_pace`)."""
    if seeds < 1 or family < 0 or not deadline_min > 0:
        raise ConfigError("referee: seeds >= 1, family >= 0, deadline above 0")
    if not policies:
        raise ConfigError("referee: name at least one policy")
    for name in policies:
        policy_from_spec(name)  # refuse a bad name before any market starts
    markets: list[tuple[int, Scenario, Campaign]] = []
    if family:
        for m in draw_family(family_seed, family):
            camp = replace(
                campaign,
                fleet=m.fleet,
                max_creates=max(campaign.max_creates, 12 * m.fleet),
                max_dph=max(campaign.max_dph, m.max_dph),
                budget_usd=max(campaign.budget_usd, 5.0 * m.fleet),
            )
            markets.append((m.index, m.scenario, camp))
    else:
        assert scenario is not None
        markets.append((0, scenario, campaign))
    deadline = deadline_min * 60
    return [
        Task(index, replace(sc, seed=sc.seed + k), with_jobs(camp), p, warm, deadline, **task_kw)
        for index, sc, camp in markets
        for k in range(seeds)
        for p in policies
    ]


def referee(
    scenario: Scenario | None,
    campaign: Campaign,
    policies: list[str],
    seeds: int,
    workers: int | None = None,
    keep_logs: str | None = None,
    **plan_kw: Any,
) -> dict[str, Any]:
    """Run every policy on every market and seed as `plan` lays them out; the referee's JSON.
    `keep_logs`: where each run's log, ledger and truth are kept; the rest as `plan` and `Task`
    take them (`lag_bound_s`: past it a run is invalid; `max_pace`: the most market seconds per
    wall second, on which scores do not depend)."""
    if keep_logs:
        Path(keep_logs).mkdir(parents=True, exist_ok=True)
        keep_logs = str(Path(keep_logs).resolve())
    tasks = plan(scenario, campaign, policies, seeds, keep_logs=keep_logs, **plan_kw)
    runs = run_all(run_task, tasks, workers or min(len(tasks), os.cpu_count() or 1))
    family, family_seed = plan_kw.get("family", 0), plan_kw.get("family_seed", 1)
    name = f"family:{family_seed}:{family}" if family else (scenario.name if scenario else "")
    return {"scenario": name, "runs": runs, "summary": summarise(runs, policies)}
