"""The poll plan at scale (issue 19 item 2): booting instances are asked for by label every
poll, steady ones in trouble by state, the rest by a paged sweep; only a finished sweep (a full
list answer) makes an instance unseen, and a booting one that vanishes is caught the next poll
by a closer look."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from rentwatch.core.lifecycle import Phase
from rentwatch.engine.cadence import FULL_PAGES, HOT_PAGES, LIST_CALLS, PAGE
from rentwatch.engine.supervisor import Supervisor
from rentwatch.engine.updates import WentSilent
from rentwatch.ledger import EventKind
from rentwatch.market.vast.client import VastClient
from rentwatch.sim.rental import Step

from bench.engine_bench import preloaded_supervisor
from tests.hostile_market import HostileMarket, Hostility

HEALTHY = [{"behaviour": "healthy", "share": 1}]
N, BOOTING = 125, 3  # five pages: more than a poll's sweep pages, so a sweep takes two polls


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


@pytest.fixture
def hostile(make_sim) -> Iterator:
    """The preloaded market behind a hostile proxy (tests/hostile_market.py)."""
    made: list[HostileMarket] = []

    def make(h: Hostility, n: int = N) -> tuple[object, HostileMarket]:
        sim = _sim(make_sim, n)
        made.append(HostileMarket(sim.url, h).start())
        return sim, made[-1]

    yield make
    for p in made:
        p.stop()


def _booting(sup: Supervisor) -> list[int]:
    return sorted(
        a.instance_id for a in sup.fleet.attempts.values() if a.life.phase == Phase.BOOTING
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
        # `offline` is computed, not stored: no list filters by it (issue 25; the market
        # refuses the filter, which would have sent the plan back to whole lists). The
        # sweep finds it, a sweep's length later at most (its host's heartbeat may sooner)
        for _ in range(-(-N // PAGE) // max(1, LIST_CALLS - 2) + 1):
            sight = await sup.cadence.fetch()
            if any(r.id == dark for r in sight.rows):
                break
        assert [r.status for r in sight.rows if r.id == dark] == ["offline"]
        await sup.observer.observe(sight, sup.market.answered_at())
        assert sup.fleet[dark].status == "offline"
        assert sup.cadence.refused is None  # the state filter the market serves, still used
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())


def test_a_refused_label_filter_falls_back_to_whole_lists_said_once(hostile, tmp_path):
    """A market that does not serve the label filter refuses it (a 4xx): every poll raised
    that refusal, the observer never ran (the controller); headless, the campaign was
    trapped. It is said once; from then on the whole list is read every poll."""
    sim, proxy = hostile(Hostility(refuse_filter="label"))

    async def run() -> None:
        sup = await _supervisor(proxy.url, tmp_path)
        for _ in range(2):
            await sup.poll_once()
        assert sup.polls == 2 and sup.cadence.whole()
        assert proxy.injected.get("refused_filter") == 1  # asked once, then never again
        said = [ln for ln in sup.journal.lines if "refused a filtered list" in ln]
        assert len(said) == 1, said
        sight = await sup.cadence.fetch()
        assert sight.full and {r.id for r in sight.rows} == set(sup.fleet.attempts)
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())


def test_a_refused_or_unreadable_show_costs_that_instance_only(hostile, tmp_path):
    """Two hot instances without a label are shown: the market refuses one (a 4xx) and
    answers for the other with a row that cannot be read. The refusal failed the poll; the
    unreadable row threw the whole poll's rows away, every poll while it was hot."""
    sim, proxy = hostile(Hostility())

    async def run() -> None:
        sup = await _supervisor(proxy.url, tmp_path)
        refused, unread, labelled = _booting(sup)
        for iid in (refused, unread):
            sup.fleet[iid].label = None  # asked for by a show, not by label
        proxy.h.refuse_show.add(refused)
        proxy.h.bad_numbers[unread] = "nan"
        for poll in (1, 2):
            await sup.poll_once()
            assert sup.polls == poll  # the poll went on: its rows were observed
        assert proxy.injected.get("refused_show") == 2  # the next poll asked again
        said = [ln for ln in sup.journal.lines if f"i:{refused} unanswered this poll" in ln]
        assert len(said) == 2, said
        bad = [e.instance_id for e in sup.ledger.events(where="kind = 'bad_row'")]
        assert bad == [unread]  # recorded, with its id, once
        sight = await sup.cadence.fetch()
        assert labelled in {r.id for r in sight.rows} and labelled in sight.asked
        assert refused not in sight.asked and unread not in sight.asked
        assert [b[0] for b in sight.bad] == [unread]
        assert all(sup.fleet[i].life.phase == Phase.BOOTING for i in (refused, unread))
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())


def test_a_hot_list_whose_paging_loops_is_cut_off(hostile, tmp_path):
    """The hot labels' list followed `next_token` with no bound: a market whose token
    pointed back at the first page held the poll for ever."""
    sim, proxy = hostile(Hostility(loop_filter="label"))

    async def run() -> None:
        sup = await _supervisor(proxy.url, tmp_path)
        booting = set(_booting(sup))
        sight = await asyncio.wait_for(sup.cadence.fetch(), 30)
        assert proxy.injected.get("looped") == HOT_PAGES
        assert booting <= {r.id for r in sight.rows}  # what it did list is seen
        assert not booting & sight.asked  # an answer that never ended proves none missing
        assert any("next_token loops" in ln for ln in sup.journal.lines)
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())


def test_a_refused_list_is_said_and_the_next_poll_asks_again(hostile, tmp_path):
    """A list the market refuses (a 4xx that is not the key) escaped the poll: in the
    controller every poll failed, headless the campaign was trapped at once."""
    n = FULL_PAGES * PAGE  # listed whole
    sim, proxy = hostile(Hostility(), n)

    async def run() -> None:
        sup = await _supervisor(proxy.url, tmp_path, n)
        proxy.h.fail_status = 400
        assert await sup.poll_once() == []
        assert sup.polls == 0 and sup.failure is None
        assert any("market refused this round's list" in ln for ln in sup.journal.lines)
        proxy.h.fail_status = 0
        await sup.poll_once()
        assert sup.polls == 1
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())


def test_an_instance_a_webhook_names_is_looked_at_next_poll(make_sim, tmp_path):
    """[T] A verified webhook about one steady instance (its host went offline) gets it asked
    for by the next poll, not when the sweep reaches it."""
    sim = _sim(make_sim)

    async def run() -> None:
        sup = await _supervisor(sim.url, tmp_path)
        steady = sorted(
            a.instance_id for a in sup.fleet.attempts.values() if a.life.phase == Phase.VERIFIED
        )
        await sup.poll_once()  # the sweep's first pages
        sight = await sup.cadence.fetch()
        # one the sweep has just read: it would not be read again until the sweep comes round
        named = next(i for i in steady if i in {r.id for r in sight.rows} - sight.asked)
        sup.cadence.look_now.add(named)
        sight = await sup.cadence.fetch()
        assert named in {r.id for r in sight.rows} and named in sight.asked
        sight = await sup.cadence.fetch()  # looked at once: the plan goes back to normal
        assert named not in sight.asked
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())


def test_a_host_whose_heartbeat_gets_no_answer_is_looked_at_next_poll(make_sim, tmp_path):
    """[Q] `offline` is computed, not stored: the list cannot be filtered by it. A verified
    host whose heartbeat got no answer is asked about by the next poll instead."""
    sim = _sim(make_sim)

    async def run() -> None:
        sup = await _supervisor(sim.url, tmp_path)
        steady = sorted(
            a.instance_id for a in sup.fleet.attempts.values() if a.life.phase == Phase.VERIFIED
        )
        await sup.poll_once()
        sight = await sup.cadence.fetch()
        named = next(i for i in steady if i in {r.id for r in sight.rows} - sight.asked)
        sup.writer.emit(WentSilent(sup.fleet[named], sup.market.now()))  # the tender: no answer
        sight = await sup.cadence.fetch()
        assert named in sight.asked and not sup.fleet[named].look_wanted
        await sup.market.aclose()
        sup.ledger.close()

    asyncio.run(run())
