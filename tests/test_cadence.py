"""The poll plan at scale (issue 19 item 2): booting instances are asked for by label every
poll, steady ones in trouble by state, the rest by a paged sweep; only a finished sweep (a full
list answer) makes an instance unseen, and a booting one that vanishes is caught the next poll
by a closer look."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rentwatch.cadence import FULL_PAGES, LIST_CALLS, PAGE
from rentwatch.client import VastClient
from rentwatch.core.lifecycle import Phase
from rentwatch.ledger import EventKind
from rentwatch.sim.market import Step
from rentwatch.supervisor import Supervisor

from bench.engine_bench import preloaded_supervisor

HEALTHY = [{"behaviour": "healthy", "share": 1}]
N, BOOTING = 150, 3  # six pages of steady rentals, three still booting


async def _supervisor(url: str, tmp: Path, n: int = N) -> Supervisor:
    return await preloaded_supervisor(url, tmp, n, booting=BOOTING, key="test-key")


def _sim(make_sim, n: int = N):
    return make_sim(
        seed=2,
        offers=n,
        time_scale=1,
        pacing=False,
        preload=n,
        preload_booting=BOOTING,
        preload_label="rw:watch",  # the watch campaign's own rentals: supervised, not observed
        host_class=HEALTHY,
    )


def test_booting_every_poll_steady_by_sweep(make_sim, tmp_path):
    sim = _sim(make_sim)

    async def run() -> None:
        sup = await _supervisor(sim.url, tmp_path)
        booting = {
            a.instance_id for a in sup.fleet.attempts.values() if a.life.phase == Phase.BOOTING
        }
        assert len(booting) == BOOTING
        steady = set(sup.fleet.attempts) - booting
        swept_at = None
        seen_steady: set[int] = set()
        for poll in range(1, 5):
            sight = await sup.cadence.fetch()
            ids = {r.id for r in sight.rows}
            assert not sight.full
            assert booting <= ids  # every poll, by label
            assert len(ids & steady) < len(steady)  # the steady ones a few pages at a time
            assert sight.calls <= LIST_CALLS
            seen_steady |= ids & steady
            if sight.swept is not None and swept_at is None:
                swept_at = poll
                assert sight.swept == set(sup.fleet.attempts)  # the sweep is a full list
        assert swept_at is not None and swept_at <= 2
        assert seen_steady == steady
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())


def test_left_out_is_not_unseen_until_the_sweep_ends(make_sim, tmp_path):
    sim = _sim(make_sim)

    async def run() -> None:
        sup = await _supervisor(sim.url, tmp_path)
        steady = sorted(
            a.instance_id for a in sup.fleet.attempts.values() if a.life.phase == Phase.VERIFIED
        )
        last = steady[-1]  # on the sweep's last page
        async with VastClient(sim.url, "test-key", min_intervals={}) as other:
            await other.destroy_instance(last)  # behind the engine's back
        await sup.poll_once()  # the sweep's first pages: the rest were not asked for
        assert all(a.unseen == 0 for a in sup.fleet.attempts.values())
        assert sup.fleet[last].life.phase == Phase.VERIFIED
        for _ in range(3):
            await sup.poll_once()
        assert sup.fleet[last].life.phase == Phase.LOST  # the sweep's end: asked, gone
        kinds = [e.kind for e in sup.ledger.instance_history(last)]
        assert EventKind.UNSEEN in kinds and EventKind.LOST in kinds
        others = [a for a in sup.fleet.attempts.values() if a.instance_id != last]
        assert all(a.life.phase != Phase.LOST and a.unseen == 0 for a in others)
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())


def test_vanished_booting_instance_is_caught_next_poll(make_sim, tmp_path):
    sim = _sim(make_sim)

    async def run() -> None:
        sup = await _supervisor(sim.url, tmp_path)
        await sup.poll_once()
        gone = next(
            a.instance_id for a in sup.fleet.attempts.values() if a.life.phase == Phase.BOOTING
        )
        async with VastClient(sim.url, "test-key", min_intervals={}) as other:
            await other.destroy_instance(gone)
        await sup.poll_once()
        assert sup.fleet[gone].life.phase == Phase.LOST  # asked for by label, then shown
        kinds = [e.kind for e in sup.ledger.instance_history(gone)]
        assert EventKind.UNSEEN not in kinds  # not left out of a full list: not unseen
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())


def test_small_fleet_is_listed_whole_every_poll(make_sim, tmp_path):
    n = FULL_PAGES * PAGE
    sim = _sim(make_sim, n)

    async def run() -> None:
        sup = await _supervisor(sim.url, tmp_path, n)
        for _ in range(2):
            sight = await sup.cadence.fetch()
            assert sight.full and {r.id for r in sight.rows} == set(sup.fleet.attempts)
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())


def test_steady_rental_going_offline_is_seen_next_poll(make_sim, tmp_path):
    sim = _sim(make_sim)

    async def run() -> None:
        sup = await _supervisor(sim.url, tmp_path)
        steady = sorted(
            a.instance_id for a in sup.fleet.attempts.values() if a.life.phase == Phase.VERIFIED
        )
        await sup.poll_once()  # the sweep's first pages: steady[50] was just read
        dark = steady[50]

        def go_dark() -> None:  # the host drops off the network now
            inst = sim.market.instances[dark]
            now = sim.market.clock.now()
            seg = inst.segments[-1]
            seg.steps.append(Step(now, "offline", None))
            seg.offline_at = seg.halted_at = now

        sim.call(go_dark)
        sight = await sup.cadence.fetch()  # the sweep reads pages 5-6 now, not dark's (3)
        assert [r.actual_status for r in sight.rows if r.id == dark] == ["offline"]
        await sup.observer.observe(sight.rows, sup.market.answered_at(), sight.full, sight.asked)
        assert sup.fleet[dark].status == "offline"  # by the state filter, this poll
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())
