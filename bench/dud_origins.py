"""Where a warm run's duds came from, on the runs a referee kept (`rentwatch referee --warm
--keep-logs DIR`): for each dud the scored campaign rented, what its warm-up had seen of it
(the machine, its host, its GPU model and price band) and whether a machine the warm-up proved
was listed, free and passed over when it was created. Then, per market, how much each piece of
evidence a renter can see tells the sim's duds apart (the sim's truth: for reading, never for
a policy).

    python -m bench.dud_origins DIR --family-seed S [--campaign bench/bid_campaign.toml]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
from rentwatch.core.offers.track_record import band
from rentwatch.market.factory import load_campaign
from rentwatch.referee.run import plan
from rentwatch.referee.score import delivers
from rentwatch.sim import churn
from rentwatch.sim.machines import Machine
from rentwatch.sim.market import SimMarket
from rentwatch.sim.scenario import DELIVERING

EPS = 1e-6


def _ledger_rows(path: Path) -> dict[int, dict[str, Any]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute(
            "SELECT instance_id, campaign, verified_at IS NOT NULL, dud, failure_class "
            "FROM instances"
        ).fetchall()
    finally:
        con.close()
    return {
        int(i): {"campaign": c, "verified": bool(v), "dud": bool(d), "class": f}
        for i, c, v, d, f in rows
    }


def _is_dud(r: dict[str, Any]) -> bool:
    """The referee's count (referee/score.py): never delivering, or never running."""
    return not delivers(r) or r["running_at"] is None


def origins(run_dir: Path, family_seed: int, campaign_path: Path) -> dict[str, Any]:
    run = json.loads((run_dir / "run.json").read_text())
    truth = json.loads((run_dir / "truth.json").read_text())
    camp = load_campaign(campaign_path.read_text(), str(campaign_path))
    task = next(
        t
        for t in plan(None, camp, [run["policy"]], 1, True, run["market"] + 1, family_seed, 600)
        if t.market == run["market"]
    )
    sc = task.scenario
    sim = SimMarket(replace(sc, seed=run["seed"]))
    by_id: dict[int, Machine] = {m.id: m for m in sim.machines + sim.others}
    ledger = _ledger_rows(run_dir / "ledger.duckdb")
    start = float(run["start"])
    rows = truth["instances"]
    warmup = [r for r in rows if r["created_at"] < start - EPS]
    warm = [r for r in rows if r["created_at"] >= start - EPS]

    def proven(r: dict[str, Any]) -> bool:
        return bool(ledger.get(int(r["id"]), {}).get("verified")) and delivers(r)

    def od(m: Machine) -> float:
        return m.dph_base

    seen_m = {int(r["machine_id"]) for r in warmup}
    seen_h: dict[int, list[bool]] = {}
    seen_b: dict[tuple[str, int], list[bool]] = {}
    for r in warmup:
        m = by_id[int(r["machine_id"])]
        seen_h.setdefault(m.host_id, []).append(_is_dud(r))
        seen_b.setdefault(band(m.advertised_gpu, od(m)), []).append(_is_dud(r))
    warm_proven = [by_id[int(r["machine_id"])] for r in warmup if proven(r)]
    dud_rows = []
    for r in warm:
        if not _is_dud(r):
            continue
        m = by_id[int(r["machine_id"])]
        at = float(r["created_at"])
        held = {
            int(x["machine_id"])
            for x in warm
            if x["created_at"] <= at + EPS
            and (x["destroyed_at"] is None or x["destroyed_at"] > at)
            and x["id"] != r["id"]
        }
        free = [
            f"m:{p.id} {p.advertised_gpu} ${p.dph_base:.3f}"
            for p in warm_proven
            if p.id not in held and churn.listed(sim.scenario.seed, sc.churn, p, at)
        ]
        kind = m.behaviour if m.behaviour not in DELIVERING else f"{m.behaviour}, never ran"
        hb = seen_h.get(m.host_id, [])
        bb = seen_b.get(band(m.advertised_gpu, od(m)), [])
        dud_rows.append(
            {
                "instance": r["id"],
                "machine": m.id,
                "kind": kind,
                "class": ledger.get(int(r["id"]), {}).get("class"),
                "gpu": m.advertised_gpu,
                "dph": od(m),
                "usd": r["total_usd"],
                "reliability": m.reliability,
                "min": round((at - start) / 60, 1),
                "machine_seen": m.id in seen_m,
                "host_seen": f"{sum(hb)}/{len(hb)}" if hb else "-",
                "band_seen": f"{sum(bb)}/{len(bb)}" if bb else "-",
                "proven_free": ", ".join(free) or "-",
                "proven_total": len(warm_proven),
            }
        )
    return {"run": run_dir.name, "duds": dud_rows, "signal": signal(sim, sc)}


def signal(sim: SimMarket, sc: Any) -> dict[str, Any]:
    """On the machines a default search returns (verified, not external): the dud share by listed
    reliability (below or above the median), by price within its model (the cheaper or dearer
    half), and among machines whose host owns another machine that is a dud or not."""
    ms = [m for m in sim.machines if m.verification == "verified" and not m.external]

    def share(group: list[Machine]) -> str:
        if not group:
            return "-"
        return (
            f"{sum(m.behaviour not in DELIVERING for m in group) / len(group):.2f} ({len(group)})"
        )

    rel = statistics.median(m.reliability for m in ms)
    cheap, dear = [], []
    for g in {m.advertised_gpu for m in ms}:
        of = [m for m in ms if m.advertised_gpu == g]
        mid = statistics.median(m.dph_base for m in of)
        cheap += [m for m in of if m.dph_base < mid]
        dear += [m for m in of if m.dph_base >= mid]
    hosts: dict[int, list[Machine]] = {}
    for m in ms:
        hosts.setdefault(m.host_id, []).append(m)
    mate_dud, mate_ok = [], []
    for m in ms:
        mates = [x for x in hosts[m.host_id] if x.id != m.id]
        if mates:
            (mate_dud if any(x.behaviour not in DELIVERING for x in mates) else mate_ok).append(m)
    return {
        "all": share(ms),
        "rel_low": share([m for m in ms if m.reliability < rel]),
        "rel_high": share([m for m in ms if m.reliability >= rel]),
        "cheap_half": share(cheap),
        "dear_half": share(dear),
        "host_mate_dud": share(mate_dud),
        "host_mate_ok": share(mate_ok),
        "reliability_signal": sc.hosts.reliability_signal,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--family-seed", type=int, required=True)
    ap.add_argument("--campaign", type=Path, default=Path("bench/bid_campaign.toml"))
    args = ap.parse_args()
    cols = [
        "instance",
        "machine",
        "kind",
        "class",
        "gpu",
        "dph",
        "usd",
        "reliability",
        "min",
        "machine_seen",
        "host_seen",
        "band_seen",
        "proven_free",
        "proven_total",
    ]
    for run_dir in sorted(p for p in args.dir.iterdir() if (p / "run.json").exists()):
        out = origins(run_dir, args.family_seed, args.campaign)
        print(f"\n{out['run']}  dud share (n) on the default search: {out['signal']}")
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for d in out["duds"]:
            print("| " + " | ".join(str(d[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
