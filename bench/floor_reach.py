"""How much of a kept run's floor a campaign could reach, from the runs a referee kept
(`rentwatch referee --family N --family-seed S --campaign C --keep-logs DIR`). An analysis of
the instrument, not a change to it: the floor (`referee/floor.py`) fills the run's work from
every delivering machine's cheapest pieces over the whole window, unverified, deverified and
external listings included (a campaign's query may ask for them), and whether or not a machine
is listed then. Here the same fill is made over (a) only the minutes each machine is listed
(`sim/churn.py`), (b) only the machines the campaign's search returns by default (verified, not
external: Vast's CLI default, `market/vast/client.OFFER_DEFAULTS`), (c) both, and (d) the
listed minutes of those and of the unverified listings (what the removed `wide_search =
"until_proven"` tried). Each is still a floor for a policy limited so; none is what a policy could pay.

`--machines` prints, per run, the machines the floor's fill bought its work from against the
machines the campaign rented: each one's GPU, Vast's verification, its cost per reference
GPU-hour, the share of the run's minutes it was listed, and what the run's warm-up (the
instances created before the scored campaign began) and the scored campaign did with it.

    python -m bench.floor_reach DIR --family-seed S [--campaign bench/bid_campaign.toml] [--machines]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rentwatch.market.factory import load_campaign
from rentwatch.referee.floor import Rentable, Work, _offers, delivered, floor, rentables
from rentwatch.referee.run import plan
from rentwatch.referee.score import delivers
from rentwatch.sim import churn
from rentwatch.sim.market import SimMarket

STEP_S = 60.0  # the listing is sampled once a market minute


def _listed(r: Rentable, listed_at: Callable[[float], bool], start: float) -> Rentable | None:
    """`r` over only the minutes its machine is listed (None: never listed in the window)."""

    def share(lo: float, secs: float) -> float:
        n = max(1, int(secs // STEP_S))
        return sum(listed_at(lo + (k + 0.5) * secs / n) for k in range(n)) / n

    pieces, at = [], start
    for secs, price in r.bid_pieces:
        s = share(at, secs)
        if s > 0:
            pieces.append((secs * s, price))
        at += secs
    whole = share(start, r.window_s)
    if whole <= 0:
        return None
    return replace(r, bid_pieces=tuple(pieces), window_s=r.window_s * whole)


def _rebuild(run_dir: Path, family_seed: int, campaign_path: Path) -> dict[str, Any]:
    """One kept run's market, window, rentals, delivered work and every rentable machine."""
    run = json.loads((run_dir / "run.json").read_text())
    truth = json.loads((run_dir / "truth.json").read_text())
    camp = load_campaign(campaign_path.read_text(), str(campaign_path))
    markets = run["market"] + 1
    task = next(
        t
        for t in plan(None, camp, [run["policy"]], 1, True, markets, family_seed, 600)
        if t.market == run["market"]
    )
    sc = task.scenario
    sim = SimMarket(replace(sc, seed=run["seed"]))
    by_id = {m.id: m for m in sim.machines + sim.others}
    start = float(run["start"])
    hi = start + task.deadline_s
    rows = [r for r in truth["instances"] if r["created_at"] >= start - 1e-6]
    good = {int(r["id"]) for r in rows if delivers(r)}
    work = delivered(truth, good, start, float(run["finish"]), task.campaign, 0)
    every = rentables(sim.machines + sim.others, sc, task.campaign, start, hi, True)
    return {
        "sc": sc,
        "by_id": by_id,
        "start": start,
        "hi": hi,
        "rows": rows,
        "good": good,
        "work": work,
        "every": every,
        "truth": truth,
    }


def reach(run_dir: Path, family_seed: int, campaign_path: Path) -> dict[str, float]:
    """One kept run: its total and its floor four ways (USD)."""
    b = _rebuild(run_dir, family_seed, campaign_path)
    sc, by_id, start, rows, work, every = (
        b["sc"],
        b["by_id"],
        b["start"],
        b["rows"],
        b["work"],
        b["every"],
    )
    listed = []
    for r in every:
        m = by_id[r.machine_id]
        one = _listed(r, lambda t, m=m: churn.listed(sc.seed, sc.churn, m, t), start)
        if one is not None:
            listed.append(one)

    def searched(r: Rentable) -> bool:
        m = by_id[r.machine_id]
        return m.verified and not m.external

    def unverified_too(r: Rentable) -> bool:  # the removed `until_proven`'s reach
        m = by_id[r.machine_id]
        return m.verification in ("verified", "unverified") and not m.external

    billing = sc.gpu_billing
    return {
        "total": sum(float(r["total_usd"]) for r in rows),
        "floor": floor(every, work, billing).usd,
        "listed": floor(listed, work, billing).usd,
        "searched": floor([r for r in every if searched(r)], work, billing).usd,
        "both": floor([r for r in listed if searched(r)], work, billing).usd,
        "unverified": floor([r for r in listed if unverified_too(r)], work, billing).usd,
    }


def _bought(every: list[Rentable], work: list[Work]) -> dict[int, tuple[float, float]]:
    """Machine id -> (units, USD) the floor's fill took from it (`referee/floor.py`'s order)."""
    out: dict[int, tuple[float, float]] = {}
    kinds: dict[tuple[float | None, bool], float] = {}
    for w in work:
        if w.hours > 0:
            kinds[(w.ref_tflops, w.bid)] = kinds.get((w.ref_tflops, w.bid), 0.0) + w.hours
    usable = [m for m in every if m.tflops > 0]
    for (ref, bid), hours in kinds.items():
        w = Work(hours, ref, bid)
        pieces = sorted(
            ((m.machine_id, *p) for m in usable for p in _offers(m, w)), key=lambda p: p[2]
        )
        need = hours
        for mid, units, per_unit, _tier in pieces:
            if need <= 1e-6:
                break
            take = min(units, need)
            u, usd = out.get(mid, (0.0, 0.0))
            out[mid] = (u + take, usd + take * per_unit)
            need -= take
    return out


def machines(run_dir: Path, family_seed: int, campaign_path: Path) -> None:
    """The floor's machines against the campaign's rentals, one line each."""
    b = _rebuild(run_dir, family_seed, campaign_path)
    sc, by_id, start, hi = b["sc"], b["by_id"], b["start"], b["hi"]
    ref = max((w.ref_tflops for w in b["work"] if w.ref_tflops), default=None)
    rentable = {r.machine_id: r for r in b["every"]}
    bought = _bought(b["every"], b["work"])
    early = [r for r in b["truth"]["instances"] if r["created_at"] < start - 1e-6]
    late = b["rows"]
    jobs: dict[int, float] = {}
    for j in b["truth"].get("jobs") or ():
        if j.get("started_at", 0.0) >= start - 1e-6:
            jobs[int(j["machine_id"])] = (
                jobs.get(int(j["machine_id"]), 0.0)
                + float(j["work_ref_h"])
                - float(j.get("resumed_ref_h") or 0.0)
            )

    def told(rows: list[dict[str, Any]], mid: int) -> str:
        mine = [r for r in rows if int(r["machine_id"]) == mid]
        if not mine:
            return "-"
        return ",".join(
            f"{'bid' if r['bid'] is not None else 'od'}${r['gpu_dph']:.3f}"
            f"{'' if delivers(r) else ' dud'}"
            for r in mine
        )

    def line(mid: int, what: str) -> str:
        m = by_id[mid]
        r = rentable.get(mid)
        unit = ""
        if r is not None and ref:
            low = min(p[1] for p in _offers(r, Work(1.0, ref, True)))
            unit = f"${low:.3f}/ref-h"
        kind = "external" if m.external else m.verification
        share = churn.listed_share(sc.seed, sc.churn, m, start, hi)
        u, usd = bought.get(mid, (0.0, 0.0))
        return (
            f"| {what} | {mid} | {m.advertised_gpu} | {kind} | {m.behaviour} | {unit} | "
            f"{share:.0%} | {u:.2f} (${usd:.3f}) | {told(early, mid)} | {told(late, mid)} | "
            f"{jobs.get(mid, 0.0):.2f} |"
        )

    print(f"\n{run_dir.name}: floor's machines, then the campaign's rentals")
    print(
        "| | machine | GPU | verification | behaviour | cheapest unit | listed | floor bought "
        "(USD) | warm-up rented | campaign rented | campaign ref-h |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for mid, _ in sorted(bought.items(), key=lambda kv: -kv[1][1]):
        print(line(mid, "floor"))
    for mid in dict.fromkeys(int(r["machine_id"]) for r in late):
        if mid not in bought:
            print(line(mid, "rented"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="a referee's --keep-logs folder")
    ap.add_argument("--family-seed", type=int, required=True)
    ap.add_argument("--campaign", type=Path, default=Path("bench/bid_campaign.toml"))
    ap.add_argument("--machines", action="store_true", help="the floor's machines and ours")
    args = ap.parse_args()
    if args.machines:
        for run_dir in sorted(p for p in args.dir.iterdir() if (p / "run.json").exists()):
            machines(run_dir, args.family_seed, args.campaign)
        return
    print(
        "| run | total | floor | listed only | searched only | both | total vs both "
        "| listed, unverified too |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for run_dir in sorted(p for p in args.dir.iterdir() if (p / "run.json").exists()):
        r = reach(run_dir, args.family_seed, args.campaign)
        print(
            f"| {run_dir.name} | {r['total']:.3f} | {r['floor']:.3f} | {r['listed']:.3f} "
            f"({r['listed'] / r['floor']:.2f}x) | {r['searched']:.3f} "
            f"({r['searched'] / r['floor']:.2f}x) | {r['both']:.3f} "
            f"({r['both'] / r['floor']:.2f}x) | {r['total'] / r['both']:.2f}x | "
            f"{r['unverified']:.3f} ({r['unverified'] / r['floor']:.2f}x) |"
        )


if __name__ == "__main__":
    main()
