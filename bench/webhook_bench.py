"""How soon the engine looks at a steady instance whose host went offline, when Vast's webhook
says so and when nothing does, at 1,000 and 10,000 instances.

Run: python -m bench.webhook_bench [--sizes 1000,10000] [--scale 10]

For each size: a preloaded fleet (bench.engine_bench) and a steady instance the sweep has just
read, then the poll loop (`engine.rounds`, the campaign's 10 s poll interval) runs the poll
plan until a poll reads that instance again. With the webhook, the event arrives just after a
poll began: the simulator's own `instance_offline` body (six fields, the instance named only
in its words), signed, verified by rentwatch's receiver, its words read for the instance, and
handed to the engine as the controller does (`Cadence.soon`: a poll now, asking about it).
Without, the sweep comes round. Printed: the polls and the market seconds from the event to
the poll that read the instance.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from rentwatch.core.lifecycle import Phase
from rentwatch.engine.rounds import rounds
from rentwatch.engine.supervisor import Supervisor
from rentwatch.notify.webhooks import WebhookEvent, WebhookVerifier, signed_headers
from rentwatch.sim.webhooks_out import payload

from bench.engine_bench import _sim, preloaded_supervisor

SECRET = "bench-secret"


class _PlanOnly:
    """The poll loop over the poll plan alone (no rules, no hosts): the look is what is timed.
    Its first poll picks the instance (one that poll's sweep read), and the event comes then."""

    def __init__(self, sup: Supervisor, webhook: bool) -> None:
        self.sup = sup
        self.webhook = webhook
        self.steady = {
            a.instance_id for a in sup.fleet.attempts.values() if a.life.phase == Phase.VERIFIED
        }
        self.target: int | None = None
        self.event_at = 0.0
        self.polls = 0  # after the event
        self.seen_at: float | None = None

    async def poll_once(self) -> None:
        sight = await self.sup.cadence.fetch()
        read = {r.id for r in sight.rows}
        if self.target is None:
            self.target = next(i for i in sorted(self.steady) if i in read - sight.asked)
            self.event_at = self.sup.market.now()
            if self.webhook:
                _deliver(self.sup, self.target, self.sup.fleet.attempts[self.target].machine_id)
            return
        self.polls += 1
        if self.seen_at is None and self.target in read:
            self.seen_at = self.sup.market.now()

    def poll_wait(self, cap: float, floor: float) -> float:
        return self.sup.poll_wait(cap, floor)


def _deliver(sup: Supervisor, target: int, machine_id: int) -> None:
    """The simulator's event about `target`, through rentwatch's receiver, to the engine."""
    import json

    body = json.dumps(payload("instance_offline", target, machine_id, time.time())).encode()
    headers = signed_headers(SECRET, body, int(time.time()), json.loads(body)["event_id"])
    verifier = WebhookVerifier(SECRET)
    event = verifier.verify(headers, body, time.time())
    assert isinstance(event, WebhookEvent), event
    held = [i for i in event.named if i in sup.fleet.attempts]  # as Controller.look does
    sup.cadence.soon(held)


async def seen_after(n: int, tmp: Path, webhook: bool, scale: float) -> tuple[int, float]:
    sim, url = _sim(tmp, n, paced=False, scale=scale)
    try:
        sup = await preloaded_supervisor(url, tmp, n)
        loop = _PlanOnly(sup, webhook)
        await rounds(loop, lambda: loop.seen_at is not None, wake=sup.cadence.wake)
        assert loop.seen_at is not None
        await sup.market.aclose()
        sup.ledger.close()
        return loop.polls, loop.seen_at - loop.event_at
    finally:
        sim.terminate()
        sim.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--scale", type=float, default=10.0, help="market seconds per wall second")
    args = ap.parse_args()
    print(
        f"{'instances':>9} {'webhook: polls':>15} {'market s':>9} {'none: polls':>12} {'market s':>9}"
    )
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as d:
            hooked = asyncio.run(seen_after(n, Path(d), True, args.scale))
        with tempfile.TemporaryDirectory() as d:
            none = asyncio.run(seen_after(n, Path(d), False, args.scale))
        print(f"{n:9d} {hooked[0]:15d} {hooked[1]:9.0f} {none[0]:12d} {none[1]:9.0f}")


if __name__ == "__main__":
    main()
