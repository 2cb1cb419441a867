"""Chaos, small size: API faults, dropped SSH sessions, a bad day, and the controller killed
(SIGKILL, then SIGTERM) and restarted. At the end the invariants hold against the sim's truth.
RENTWATCH_CHAOS_LONG=1 runs the long mode (more jobs, more kills), and puts the hostile market
(tests/hostile_market.py) in front of the simulator with every class of issue 14 mixed in:
rows missing from lists and repeated, create answers naming held ids, bad numbers, negative
offer prices, trickled answers, escapes in status lines and GPU names, garbled bodies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from rentwatch.ledger import Ledger

from .campaigns import (
    HeadlessRun,
    campaign_text,
    headless_cmd,
    headless_env,
    restarted,
    truth_at,
)
from .hostile_market import HostileMarket, Hostility

LONG = os.environ.get("RENTWATCH_CHAOS_LONG") == "1"
# the long mode's hostile market slows every job's progress (answers lost, rows unseen,
# creates resolved by label): 50 jobs are hundreds of creates (30 made 152)
N_JOBS = int(os.environ.get("RENTWATCH_CHAOS_JOBS", "50")) if LONG else 6
RETRIES = 30 if LONG else 8  # the long market kills about every other attempt
KILLS = [signal.SIGKILL, signal.SIGTERM] * (4 if LONG else 1)
SEED = int(os.environ.get("RENTWATCH_CHAOS_SEED", "13"))
# market seconds per wall second: every wall second the controller cannot see (a timed-out
# answer, a restart) is this many market seconds of status changes it dates late
SCALE = float(os.environ.get("RENTWATCH_CHAOS_SCALE", "120"))
# the small mode is the bad day; the long one is a bad day where every host that delivers goes
# offline a few minutes into its work (short pulls, so each rental turns over quickly): jobs keep
# moving and creates keep coming, hundreds of them
_FAST = {"pull_min": [1.0, 3.0], "extract_min": [0.2, 0.6]}
MARKET = (
    {
        "bad_day": True,
        "host_class": [
            {"behaviour": "offline_midrun", "share": 0.25, "offline_after_min": [3.0, 8.0]},
            {"behaviour": "freeze_pull", "share": 0.25},
            {"behaviour": "fatal_pull", "share": 0.2, "fatal_at_min": [0.5, 3.0]},
            {"behaviour": "exited", "share": 0.1},
            {"behaviour": "stale_driver", "share": 0.1},
            {"behaviour": "ssh_dead", "share": 0.1},
        ],
    }
    if LONG
    else {"bad_day": True}
)
if LONG:
    for hc in MARKET["host_class"]:
        hc.update({k: v for k, v in _FAST.items() if k not in hc})
# a kill every this many lines of the controller's output
KILL_AFTER_LINES = 100 if LONG else 25
# the long mode's lies, each class at a rate that leaves the campaign able to finish; rates are
# per answer or per row (a fleet of 6 over a few thousand polls: dozens of each)
HOSTILE = Hostility(
    drop_rate=0.01,
    repeat_rows=0.02,
    create_repeat_id=12,
    bad_number_rate=0.005,
    negative_offers=0.05,
    trickle_s=0.05,
    trickle_answers=12,
    escapes=True,
    escape_gpu_names=True,
    garble_rate=0.01,
    seed=SEED,
)
BAD = ("\x1b", "\x9b", "\x9d", "\x07", "\u202e")


def _explain(sim, led, iid: int, diff: float, end: float) -> str:
    """One instance billed differently: the market's own record beside the ledger's events."""

    def record() -> str:
        i = sim.market.instances[iid]
        segs = [(s.start, s.running_at, s.halted_at, s.offline_at, s.end) for s in i.segments]
        return f"{i.machine.behaviour} created {i.created_at} segments {segs} destroyed {i.destroyed_at}"

    events = [
        (e.at, e.actor, str(e.kind), e.phase, e.ok, e.detail.get("status"))
        for e in led.events(where="instance_id = ?", params=[iid])
        if e.kind in ("create", "status", "stop", "start", "destroy", "lost", "returned", "adopted")
    ]
    return f"i:{iid} ledger-market {diff:+.4f} at {end}: market {sim.call(record)}; ledger {events}"


NOT_OURS = ("market", "reconcile", "watchdog")  # who else stops a rental (app/engine/carry_on.py)


def _dating_usd(sim, events) -> dict[int, float]:
    """Per rental, what the ledger may bill over or under the market for want of a date no
    answer gives, measured here against the market's own record:
    - a stop this controller did not make (the host's watchdog while the controller was down,
      the market) is dated when it was seen, to bill never less (`noticed_between`): over by
      the ledger's date less the market's;
    - a change whose answer was lost (`answer_lost`), or that a kill cut short (`reconciled`),
      is dated by the send of its try, and the market acts as the request arrives: under by
      the market's date less the ledger's.
    Both are market seconds of a box's wall time, SCALE times over (at 120x a restart the box's
    load stretches past the watchdog's window leaves the host stopped unseen for minutes)."""

    def lags() -> dict[int, float]:
        out: dict[int, float] = {}
        for e in events:
            inst = sim.market.instances.get(e.instance_id)
            if inst is None or not e.ok:
                continue
            stops = list(inst.stops)
            lag = 0.0
            if e.kind == "stop" and e.actor in NOT_OURS and e.phase == "fact":
                before = [t for t in stops if t <= e.at]
                lag = e.at - max(before) if before else 0.0
            elif e.phase == "outcome" and ({"answer_lost", "reconciled"} & set(e.detail or {})):
                if e.kind == "stop":
                    after = [t for t in stops if t >= e.at]
                    lag = min(after) - e.at if after else 0.0
                elif e.kind == "destroy" and inst.destroyed_at is not None:
                    lag = max(0.0, inst.destroyed_at - e.at)
            rate = inst.gpu_dph + inst.storage_dph
            out[e.instance_id] = out.get(e.instance_id, 0.0) + lag * rate / 3600
        return out

    return sim.call(lags)


def _jobs(n: int) -> str:
    return "".join(
        f'\n[[jobs]]\nname = "j{i}"\nrun = "python3 -c \\"import time; time.sleep(1)\\""\nretries = {RETRIES}\n'
        for i in range(n)
    )


@pytest.mark.timeout(0 if LONG else 900)
def test_chaos_invariants(make_sim, tmp_path):
    sim = make_sim(
        seed=SEED,
        offers=1200 if LONG else 80,
        time_scale=SCALE,
        **MARKET,
        faults={
            "rate_429": 0.05,
            "rate_5xx": 0.03,
            "rate_timeout": 0.02,
            "rate_malformed": 0.02,
            "ssh_drop": 0.03,
            "timeout_s": 1.5,
        },
    )
    camp = tmp_path / "c.toml"
    fleet, creates = (6, 1000) if LONG else (2, 80)
    camp.write_text(
        campaign_text("chaos", fleet)
        .replace("max_creates = 60", f"max_creates = {creates}")
        # the hard budget counts conservatively (what may still bill): room for the long run
        .replace("budget_usd = 20.0", f"budget_usd = {60.0 if LONG else 20.0}")
        + _jobs(N_JOBS)
    )
    ledger = tmp_path / "l.duckdb"
    env = headless_env(sim)
    cmd = headless_cmd(sim, tmp_path, camp, ledger, "--http-timeout", "1.0")
    # RENTWATCH_CHAOS_HOSTILE=0: the long mode without the liar (to tell its effects apart)
    hostile_on = LONG and os.environ.get("RENTWATCH_CHAOS_HOSTILE", "1") != "0"
    proxy = HostileMarket(sim.url, HOSTILE).start() if hostile_on else None
    if proxy is not None:  # rentwatch talks to the liar; the truth is read from the sim
        cmd = [proxy.url if a == sim.url else a for a in cmd]
    outputs, began = [], time.time()
    spawned: list[float] = []  # market time as each run was started
    # each run after the first is a restart: the market stands from its predecessor's end until
    # it has adopted (`restarted`), so the gap the kills mean is short whatever the box's load
    for n, sig in enumerate(KILLS):
        spawned.append(sim.market.clock.now())
        run = restarted(sim, cmd, env, tmp_path) if n else HeadlessRun(cmd, env, tmp_path)
        seen, deadline = 0, time.time() + (300 if LONG else 90)
        while seen < KILL_AFTER_LINES and run.readline(deadline - time.time()):
            seen += 1
        run.proc.send_signal(sig)
        outputs.append(run.finish(60))
    spawned.append(sim.market.clock.now())
    final = restarted(sim, cmd, env, tmp_path)
    outputs.append(final.finish(3000 if LONG else 400))
    if proxy is not None:
        proxy.stop()
    assert final.proc.returncode == 0, outputs[-1][-3000:]
    assert not [o for o in outputs if "Traceback" in o], "an unhandled exception:\n" + "\n".join(
        o[o.index("Traceback") - 500 : o.index("Traceback") + 3000]
        for o in outputs
        if "Traceback" in o
    )
    assert not [c for o in outputs for c in BAD if c in o], "an escape reached the log"

    led = Ledger(ledger)
    rows = led.instance_rows()
    end = max(e.at for e in led.events())
    truth = truth_at(sim, end)
    # no leak: nothing is left running
    assert all(t["destroyed"] or t["stopped"] for t in truth.values())
    # between a kill and the restart nothing went unwatched longer than the watchdog's window:
    # from the killed run's last sign of life to the restart's start. The restart's own start
    # (a fresh interpreter, its imports, its first list) is wall time the box's load sets,
    # SCALE times over in market time: it counts in `unwatched_s` but not against the window
    # (at 120x a loaded box's restart took 11 wall s, 1332 market s)
    adopted = led.events(where="kind = 'adopted'")
    unwatched = [e.detail["unwatched_s"] for e in adopted]
    gaps = [
        max(s for s in spawned if s <= e.at) - (e.at - e.detail["unwatched_s"]) for e in adopted
    ]
    assert max(gaps, default=0) < 15 * 60, (max(gaps), unwatched)
    # no verified instance destroyed by automation
    verified = {r["instance_id"] for r in rows if r["verified_at"] is not None}
    auto = {
        e.instance_id
        for e in led.events(
            where="kind = 'destroy' AND phase = 'outcome' AND ok AND actor <> 'human'"
        )
    }
    assert not verified & auto
    # no job lost or finished twice
    done = [e.detail["job"] for e in led.events(where="kind = 'job_finished' AND ok")]
    assert sorted(done) == sorted(f"j{i}" for i in range(N_JOBS))
    # money: every instance the market billed is in the ledger, and billed the same to the cent
    # (a lost answer is dated to when its request went out; see VastClient._act)
    in_ledger = {r["instance_id"] for r in rows}
    missing = {i: truth[i] for i in set(truth) - in_ledger}
    assert not missing, f"billed by the market, not in the ledger: {missing}"
    assert in_ledger <= set(truth), (
        f"in the ledger, unknown to the market: {in_ledger - set(truth)}"
    )
    worst = max((abs(r["total_usd"] - truth[r["instance_id"]]["usd"]) for r in rows), default=0)
    dating = _dating_usd(
        sim, led.events(where="kind IN ('stop', 'destroy') AND instance_id IS NOT NULL")
    )
    off = {
        r["instance_id"]: r["total_usd"] - truth[r["instance_id"]]["usd"]
        for r in rows
        if abs(r["total_usd"] - truth[r["instance_id"]]["usd"])
        >= 0.005 + dating.get(r["instance_id"], 0.0)
    }
    assert not off, f"instances billed differently from the market: {off}\n" + "\n".join(
        _explain(sim, led, iid, diff, end) for iid, diff in off.items()
    )
    ledger_total = sum(r["total_usd"] for r in rows)
    truth_total = sum(t["usd"] for t in truth.values())
    # the total: a cent, or a tenth of the per-instance bound per rental on a long run, where
    # stops seen a poll late all lean one way (the ledger never bills less than it saw)
    assert abs(ledger_total - truth_total) < max(0.01, 0.0005 * len(rows)) + sum(dating.values()), (
        ledger_total,
        truth_total,
        dating,
    )
    retried = len(led.events(where="kind = 'job_started'")) - N_JOBS
    led.close()  # `rentwatch reconcile` below opens the ledger in a process of its own
    hostile = ""
    if proxy is not None:
        # every class was injected, and none cost a poll whole: the only polls skipped are
        # those whose list answer failed as a whole (a fault, a garbled body, a trickle cut off)
        classes = ("dropped", "repeated", "create_repeat_id", "negative_offer", "trickle")
        assert all(proxy.injected.get(c, 0) > 0 for c in classes), proxy.injected
        assert any(k.startswith("bad_number") for k in proxy.injected), proxy.injected
        skipped = [
            ln
            for o in outputs
            for ln in o.splitlines()
            if "market unavailable this round" in ln or "market refused this round's list" in ln
        ]
        faults = sum(sim.api.faults_injected.values())
        whole = faults + proxy.injected.get("garbled", 0) + HOSTILE.trickle_answers
        assert len(skipped) <= whole, (len(skipped), whole, skipped[:5])
        assert not [ln for ln in skipped if "nan" in ln.lower() or "row" in ln.lower()], skipped
        hostile = f", hostile {dict(sorted(proxy.injected.items()))}, polls skipped {len(skipped)}"
        # the market's own bill agrees with the ledger's: `rentwatch reconcile` finds nothing
        rec = subprocess.run(
            [*cmd[:3], "reconcile", "--ledger", str(ledger), "--market-url", sim.url, "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=300,
        )
        assert rec.returncode == 0, rec.stdout[-3000:] + rec.stderr[-2000:]
        hostile += f", reconcile {len(json.loads(rec.stdout).get('differences', []))} differences"
    print(
        f"\nchaos seed {SEED} (time scale {SCALE:g}): {len(rows)} creates, {len(verified)} verified, kills {len(KILLS)}, "
        f"{len(unwatched)} adoptions (longest unwatched {max(unwatched, default=0) / 60:.1f} min), "
        f"faults {sim.api.faults_injected}, ssh drops {sim.ssh.dropped}, jobs {len(done)} "
        f"({retried} restarts), duds {sum(1 for r in rows if r['dud'])}, ledger "
        f"${ledger_total:.4f} vs truth ${truth_total:.4f} (worst instance ${worst:.4f} off, "
        f"${sum(dating.values()):.4f} dated by sight or send), "
        f"{time.time() - began:.0f} s{hostile}"
    )


def test_the_dating_allowance_is_measured_on_the_markets_record():
    from types import SimpleNamespace as N

    insts = {
        # stopped by its watchdog at 1000 while no controller ran, found at the restart at 1600
        7: N(stops=[1000.0], destroyed_at=None, gpu_dph=0.3, storage_dph=0.06),
        # our stop, its answer lost: sent at 2000, acted on as it arrived at 2060
        8: N(stops=[2060.0], destroyed_at=None, gpu_dph=0.3, storage_dph=0.06),
        # our stop, answered: dated by the market's stamp, no allowance
        9: N(stops=[3000.0], destroyed_at=None, gpu_dph=0.3, storage_dph=0.06),
    }
    sim = N(market=N(instances=insts), call=lambda f: f())

    def stop(iid: int, at: float, actor: str, phase: str, **detail) -> N:
        return N(
            kind="stop", actor=actor, phase=phase, ok=True, instance_id=iid, at=at, detail=detail
        )

    events = [
        stop(7, 1600.0, "reconcile", "fact"),
        stop(8, 2000.0, "human", "outcome", answer_lost=True),
        stop(9, 3000.0, "human", "outcome"),
    ]
    got = _dating_usd(sim, events)
    assert got[7] == pytest.approx(600 * 0.36 / 3600)
    assert got[8] == pytest.approx(60 * 0.36 / 3600)
    assert got[9] == 0.0
