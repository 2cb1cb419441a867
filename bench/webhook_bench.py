"""How soon the engine looks at a steady instance that a verified webhook (or a silent
heartbeat) names, against waiting for the sweep, at 1,000 and 10,000 instances.

Run: python -m bench.webhook_bench [--sizes 1000,10000]

For each size: a preloaded fleet (bench.engine_bench), a steady instance the sweep has just
read, then the polls until the engine asks about it again: once it is named
(`Cadence.look_now`), and with nothing naming it (the sweep coming round). Polls, not seconds:
a poll is `poll_s` of market time whatever the fleet's size (the plan's calls are bounded).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from rentwatch.core.lifecycle import Phase

from bench.engine_bench import _sim, preloaded_supervisor


async def polls_until_seen(n: int, tmp: Path, named: bool, cap: int) -> int:
    sim, url = _sim(tmp, n, paced=False, scale=1.0)
    try:
        sup = await preloaded_supervisor(url, tmp, n)
        steady = {
            a.instance_id for a in sup.fleet.attempts.values() if a.life.phase == Phase.VERIFIED
        }
        sight = await sup.cadence.fetch()
        target = next(i for i in sorted(steady) if i in {r.id for r in sight.rows} - sight.asked)
        if named:
            sup.cadence.look_now.add(target)
        for k in range(1, cap + 1):
            sight = await sup.cadence.fetch()
            if target in {r.id for r in sight.rows}:
                return k
        return cap + 1
    finally:
        sim.terminate()
        sim.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    args = ap.parse_args()
    print(f"{'instances':>9} {'named: polls':>13} {'sweep: polls':>13}")
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as d:
            named = asyncio.run(polls_until_seen(n, Path(d), True, 5))
        with tempfile.TemporaryDirectory() as d:
            sweep = asyncio.run(polls_until_seen(n, Path(d), False, 2 * n // 25 + 10))
        print(f"{n:9d} {named:13d} {sweep:13d}")


if __name__ == "__main__":
    main()
