"""How much of a kept run's floor a campaign could reach, from the runs a referee kept
(`rentwatch referee --family N --family-seed S --campaign C --keep-logs DIR`). An analysis of
the instrument, not a change to it: the floor (`referee/floor.py`) fills the run's work from
every delivering machine's cheapest pieces over the whole window, unverified, deverified and
external listings included (a campaign's query may ask for them), and whether or not a machine
is listed then. Here the same fill is made over (a) only the minutes each machine is listed
(`sim/churn.py`), (b) only the machines the campaign's search returns by default (verified, not
external: Vast's CLI default, `market/vast/client.OFFER_DEFAULTS`), and (c) both. Each is still a
floor for a policy limited so; none is what a policy could pay.

    python -m bench.floor_reach DIR --family-seed S [--campaign bench/bid_campaign.toml]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rentwatch.market.factory import load_campaign
from rentwatch.referee.floor import Rentable, delivered, floor, rentables
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


def reach(run_dir: Path, family_seed: int, campaign_path: Path) -> dict[str, float]:
    """One kept run: its total and its floor four ways (USD)."""
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
    work = delivered(truth, good, start, float(run["finish"]), task.campaign, 0, 0.0)
    every = rentables(sim.machines + sim.others, sc, task.campaign, start, hi, True)
    listed = []
    for r in every:
        m = by_id[r.machine_id]
        one = _listed(r, lambda t, m=m: churn.listed(sc.seed, sc.churn, m, t), start)
        if one is not None:
            listed.append(one)

    def searched(r: Rentable) -> bool:
        m = by_id[r.machine_id]
        return m.verified and not m.external

    billing = sc.gpu_billing
    return {
        "total": sum(float(r["total_usd"]) for r in rows),
        "floor": floor(every, work, billing).usd,
        "listed": floor(listed, work, billing).usd,
        "searched": floor([r for r in every if searched(r)], work, billing).usd,
        "both": floor([r for r in listed if searched(r)], work, billing).usd,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path, help="a referee's --keep-logs folder")
    ap.add_argument("--family-seed", type=int, required=True)
    ap.add_argument("--campaign", type=Path, default=Path("bench/bid_campaign.toml"))
    args = ap.parse_args()
    print("| run | total | floor | listed only | searched only | both | total vs both |")
    print("|---|---|---|---|---|---|---|")
    for run_dir in sorted(p for p in args.dir.iterdir() if (p / "run.json").exists()):
        r = reach(run_dir, args.family_seed, args.campaign)
        print(
            f"| {run_dir.name} | {r['total']:.3f} | {r['floor']:.3f} | {r['listed']:.3f} "
            f"({r['listed'] / r['floor']:.2f}x) | {r['searched']:.3f} "
            f"({r['searched'] / r['floor']:.2f}x) | {r['both']:.3f} "
            f"({r['both'] / r['floor']:.2f}x) | {r['total'] / r['both']:.2f}x |"
        )


if __name__ == "__main__":
    main()
