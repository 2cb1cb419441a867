"""Where the money and the time of refereed runs go, from the runs a referee kept
(`rentwatch referee ... --keep-logs DIR`): each run's bill from the sim's truth split into the
work itself (job GPU-hours x the host's price), duds, a delivering host's GPU time before its
first job (booting under `created` billing, preflight, waiting for a job), between jobs, after
its last job (the tail), delivering hosts that never ran a job (spares), storage while held
and while stopped, and bandwidth; and the run's times (first verified host, fleet, last job,
requeues).

    python -m bench.referee_costs DIR [--by-market]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from rentwatch.ledger import EventKind, Ledger
from rentwatch.referee.campaigns import DEFAULT_JOB_MIN, JOBS_PER_INSTANCE, referee_campaign
from rentwatch.referee.score import delivers
from rentwatch.sim.family import draw_family
from rentwatch.sim.market import SimMarket

PARTS = (
    "work",
    "duds",
    "before_job",
    "between_jobs",
    "after_jobs",
    "spares",
    "storage_held",
    "storage_stopped",
    "bandwidth",
)
TIMES = ("first_verified", "first_job", "last_job", "requeues", "work_dph", "hosts")


def _spans(
    ledger_path: Path, campaign: str = "referee"
) -> tuple[dict[int, list[tuple[float, float]]], int, dict[int, float]]:
    """Every job attempt's (start, end) per instance, requeued ones included, from the ledger;
    how many attempts were requeued; and the seconds each instance ran attempts that were."""
    ledger = Ledger(ledger_path)
    try:
        events = ledger.campaign_events(campaign, EventKind.JOB_STARTED, EventKind.JOB_FINISHED)
    finally:
        ledger.close()
    open_at: dict[tuple[int | None, str], float] = {}
    requeued = sum(1 for ev in events if ev.detail.get("requeued"))
    out: dict[int, list[tuple[float, float]]] = {}
    redone: dict[int, float] = {}
    for ev in events:
        job = str(ev.detail.get("job"))
        if ev.kind == EventKind.JOB_STARTED:
            open_at[(ev.instance_id, job)] = ev.at
        elif (ev.instance_id, job) in open_at and ev.instance_id is not None:
            began = open_at.pop((ev.instance_id, job))
            out.setdefault(ev.instance_id, []).append((began, ev.at))
            if ev.detail.get("requeued"):
                redone[ev.instance_id] = redone.get(ev.instance_id, 0.0) + ev.at - began
    for (iid, _), at in open_at.items():
        if iid is not None:
            out.setdefault(iid, []).append((at, float("inf")))
    return out, requeued, redone


def decompose(run_dir: Path) -> dict[str, Any]:
    """One kept run: its bill split into PARTS (USD) and its TIMES (market minutes)."""
    truth = json.loads((run_dir / "truth.json").read_text())
    run = json.loads((run_dir / "run.json").read_text())
    start, finish, now = float(run["start"]), float(run["finish"]), float(truth["now"])
    spans, requeues, redone = _spans(run_dir / "ledger.duckdb", run.get("campaign", "referee"))
    rerun = 0.0
    parts = dict.fromkeys(PARTS, 0.0)
    work_h = work_usd = 0.0
    hosts = 0
    for r in truth["instances"]:
        if r["created_at"] < start - 1e-6:
            continue
        parts["bandwidth"] += r.get("bandwidth_usd", 0.0)
        if not delivers(r) or r["running_at"] is None:
            parts["duds"] += r["gpu_usd"] + r["storage_usd"]
            continue
        hosts += 1
        gpu_dph, st_dph = float(r["gpu_dph"]), float(r["storage_dph"])
        rerun += redone.get(r["id"], 0.0) * gpu_dph / 3600
        end = min(x for x in (r["destroyed_at"], r["stopped_at"], now) if x is not None)
        stopped = 0.0
        if r["stopped_at"] is not None:
            stopped = (r["destroyed_at"] or now) - r["stopped_at"]
        parts["storage_stopped"] += stopped * st_dph / 3600
        parts["storage_held"] += r["storage_usd"] - stopped * st_dph / 3600
        mine = sorted((max(a, r["running_at"]), min(b, end)) for a, b in spans.get(r["id"], []))
        job_s = sum(max(0.0, b - a) for a, b in mine)
        work = job_s * gpu_dph / 3600
        parts["work"] += work
        work_h, work_usd = work_h + job_s / 3600, work_usd + work
        rest = r["gpu_usd"] - work
        if not mine:
            parts["spares"] += rest
            continue
        first, last = mine[0][0], max(b for _, b in mine)
        after = max(0.0, end - last) * gpu_dph / 3600
        before = max(0.0, rest - after - _gaps(mine) * gpu_dph / 3600)
        parts["after_jobs"] += after
        parts["before_job"] += before
        parts["between_jobs"] += max(0.0, rest - after - before)
        del first
    verified = sorted(float(v) for v in run["verified_at"].values())
    jobs = run["jobs"]
    done = [j["finished_at"] for j in jobs if j["status"] == "done" and j["finished_at"]]
    starts = [a for s in spans.values() for a, _ in s]
    times = {
        "first_verified": (verified[0] - start) / 60 if verified else None,
        "first_job": (min(starts) - start) / 60 if starts else None,
        "last_job": (max(done) - start) / 60 if len(done) == len(jobs) and done else None,
        "requeues": requeues,
        "work_dph": work_usd / work_h if work_h else None,
        "hosts": hosts,
        "end_lag": (finish - max(done)) / 60 if done else None,
    }
    total = sum(r["total_usd"] for r in truth["instances"] if r["created_at"] >= start - 1e-6)
    return {
        "policy": run["policy"],
        "market": run["market"],
        "fleet": run["fleet"],
        "billing": run["gpu_billing"],
        "total": total,
        "rerun": rerun,  # job attempts later requeued, already inside "work"
        **parts,
        **times,
    }


def work_floor(family_seed: int, index: int) -> float:
    """The least a policy holding the fleet can pay for the default job set on family market
    `index`: its GPU-hours (jobs are fixed market time, whatever the GPU) on the `fleet`
    cheapest delivering machines the referee's campaign may rent there (price ceiling, CUDA),
    nothing else billed: no dud, no boot, no idle minute, no storage."""
    m = draw_family(family_seed, index + 1)[index]
    camp = referee_campaign()
    ceiling = max(camp.max_dph, m.max_dph)
    prices = sorted(
        x.dph_base
        for x in SimMarket(m.scenario).machines
        if delivers({"behaviour": x.behaviour})
        and x.dph_base <= ceiling
        and x.cuda_max_good >= camp.image_cuda
    )[: m.fleet]
    hours = JOBS_PER_INSTANCE * DEFAULT_JOB_MIN / 60  # per host
    return hours * sum(prices) if prices else float("nan")


def _gaps(spans: list[tuple[float, float]]) -> float:
    """Seconds between consecutive job attempts on one host."""
    gap, last = 0.0, spans[0][1]
    for a, b in spans[1:]:
        gap += max(0.0, a - last)
        last = max(last, b)
    return gap


def _med(vals: list[Any]) -> float | None:
    nums = [float(v) for v in vals if v is not None]
    return statistics.median(nums) if nums else None


def _f(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="the folder given to `rentwatch referee --keep-logs`")
    ap.add_argument("--by-market", action="store_true", help="one row per market and policy")
    ap.add_argument(
        "--family-seed", type=int, help="the family the runs came from: adds each market's floor"
    )
    args = ap.parse_args()
    rows = [decompose(d) for d in sorted(Path(args.dir).iterdir()) if (d / "truth.json").exists()]
    floors: dict[int, float] = {}
    if args.family_seed is not None:
        floors = {m: work_floor(args.family_seed, m) for m in {r["market"] for r in rows}}
    for r in rows:
        r["floor"] = floors.get(r["market"])
    cols = [
        "total",
        "floor",
        *PARTS,
        "first_verified",
        "first_job",
        "last_job",
        "end_lag",
        "requeues",
    ]
    cols += ["work_dph", "hosts"]
    head = ["market", "policy", "fleet", "billing"] if args.by_market else ["policy", "runs"]
    print("| " + " | ".join(head + cols) + " |")
    print("|" + "---|" * (len(head) + len(cols)))
    if args.by_market:
        for r in sorted(rows, key=lambda r: (r["market"], r["policy"])):
            vals = [r["market"], r["policy"], r["fleet"], r["billing"]]
            print("| " + " | ".join(_f(v) for v in vals + [r[c] for c in cols]) + " |")
        return
    for policy in sorted({r["policy"] for r in rows}):
        mine = [r for r in rows if r["policy"] == policy]
        meds = [_med([r[c] for r in mine]) for c in cols]
        print("| " + " | ".join([policy, str(len(mine))] + [_f(v) for v in meds]) + " |")


if __name__ == "__main__":
    main()
