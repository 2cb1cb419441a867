"""Renter-side reputation and the offer ranking."""

from __future__ import annotations

from rentwatch.core.models import Offer
from rentwatch.core.offers.reputation import offer_odds, rank_offers


def offer(oid: int, machine: int, dph: float, rel: float | None = 0.95) -> Offer:
    return Offer(
        id=oid,
        machine_id=machine,
        host_id=1,
        gpu_name="RTX 3090",
        num_gpus=1,
        dph_total=dph,
        gpu_dph=dph,
        storage_cost=0.1,
        cuda_max_good=12.4,
        reliability=rel,
        driver_version=None,
        gpu_ram_mb=None,
        geolocation=None,
    )


def p_deliver(good: float, bad: float, score: float | None) -> float:
    return offer_odds((good, bad, 0.0), score, None)


def test_prior_and_updates():
    unknown = p_deliver(0, 0, 0.95)
    assert 0.3 < unknown < 0.5  # an honest prior: most creates fail on this market
    assert p_deliver(0, 0, None) == p_deliver(0, 0, 0.95)
    assert p_deliver(0, 0, 0.999) > p_deliver(0, 0, 0.90)  # the platform's score: a weak prior only
    assert p_deliver(0, 0, 0.999) - p_deliver(0, 0, 0.90) < 0.1
    assert p_deliver(10, 1, 0.90) > 0.8  # our own record outweighs it
    assert p_deliver(0, 5, 0.999) < 0.15
    assert p_deliver(3, 0, None) > p_deliver(1, 0, None) > unknown


def test_ranking_by_expected_cost():
    cheap_bad = offer(1, 100, 0.10)
    fair_good = offer(2, 200, 0.20)
    unknown = offer(3, 300, 0.15)
    history = {100: (0, 4, 0.08), 200: (6, 0, 0.0)}
    ranked = [
        o.id for o, _ in rank_offers([cheap_bad, fair_good, unknown], history, by="expected_cost")
    ]
    assert ranked[0] == 2 and ranked[-1] == 1  # the cheap machine with a bad record goes last
    assert [o.id for o, _ in rank_offers([cheap_bad, fair_good, unknown], history, by="price")] == [
        1,
        3,
        2,
    ]
    _, why = rank_offers([fair_good], history, by="expected_cost")[0]
    assert why.startswith("m:200 $0.200/h, p(deliver)=") and "from 6 runs, effective $" in why


def test_the_platforms_score_does_not_reorder_offers_we_know_nothing_of():
    """Renter-side memory only: on a market new to us, expected cost ranks by price, whatever
    uptime score the platform gives each offer; our own record then reorders it."""
    pricey_famous = offer(1, 100, 0.20, rel=0.999)
    cheap_unknown = offer(2, 200, 0.15, rel=0.90)
    ranked = rank_offers([pricey_famous, cheap_unknown], {}, by="expected_cost")
    assert [o.id for o, _ in ranked] == [2, 1]
    ours = {100: (3, 0, 0.0), 200: (0, 2, 0.05)}
    ranked = rank_offers([pricey_famous, cheap_unknown], ours, by="expected_cost")
    assert [o.id for o, _ in ranked] == [1, 2]


def test_quarantined_machines_never_offered(make_sim, tmp_path):
    """Offer choice excludes quarantined machines whatever their price (checked in the engine)."""
    import asyncio

    from rentwatch.core.policy import get_policy
    from rentwatch.engine.hosts.ssh import SSHRunner, load_or_create_key
    from rentwatch.engine.supervisor import Supervisor
    from rentwatch.ledger import Ledger
    from rentwatch.market.factory import load_campaign
    from rentwatch.market.vast.client import VastClient

    from .campaigns import campaign_text

    sim = make_sim(seed=3, offers=5)

    async def run() -> tuple[int, set[int], set[int]]:
        async with VastClient(sim.url, sim.api_key, min_intervals={}) as c:
            sup = Supervisor(
                c,
                Ledger(tmp_path / "l.duckdb"),
                load_campaign(campaign_text("q", 1)),
                get_policy("default"),
                SSHRunner(load_or_create_key(tmp_path / "k")),
                log=lambda _: None,
            )
            await sup.offer_book.refresh()
            before = {o.machine_id for o in sup.offer_book.fit()}
            cheapest = min(sup.offer_book.fit(), key=lambda o: o.dph_total)
            sup.fleet.quarantine[cheapest.machine_id] = "test"
            return cheapest.machine_id, before, {o.machine_id for o in sup.offer_book.fit()}

    quarantined, before, after = asyncio.run(run())
    assert quarantined in before and quarantined not in after
    assert after == before - {quarantined}
