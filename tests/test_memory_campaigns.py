"""Memory that pays back, on the simulator: a second campaign on the same ledger starts from
what the first learned (warm priors). A machine the first found dead is not rented again, and
a machine that delivered ranks above an unknown one of the same model and price."""

from __future__ import annotations

from types import SimpleNamespace

from rentwatch.core.campaign import Job
from rentwatch.core.models import Offer
from rentwatch.core.offers.choice import rank_by_work
from rentwatch.core.policy import DEFAULT
from rentwatch.engine.offers import OfferBook
from rentwatch.ledger import Ledger

from .campaigns import run_campaign

# three jobs of 9 market minutes each: enough for the first campaign to meet a dud and a
# machine that delivered (asserted below); each market minute played costs CPU
SIZED = "".join(
    f"""
[[jobs]]
name = "fit-{i}"
run = "mkdir -p out && echo {i} > out/r.txt"
artifacts = ["out/r.txt"]
ref_gpu = "RTX 4090"
ref_hours = 0.15
retries = 3
"""
    for i in range(3)
)


def _offer(oid: int, machine: int, gpu: str, dph: float) -> Offer:
    return Offer(oid, machine, None, gpu, 1, dph, dph, 0.1, 12.8, 0.98, None, 24576.0, "US")


def test_the_second_campaign_skips_the_firsts_duds_and_prefers_what_delivered(
    make_sim, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    sim = make_sim(  # on the stepped clock: a job's measured speed does not move with the box
        stepped=True,
        seed=23,
        offers=24,
        host_class=[
            {"behaviour": "healthy", "share": 0.5, "gpu": ["RTX 3090"], "dph": [0.15, 0.3]},
            {"behaviour": "fatal_pull", "share": 0.25, "gpu": ["RTX 3090"], "dph": [0.1, 0.3]},
            {"behaviour": "stale_driver", "share": 0.25, "gpu": ["RTX 3090"], "dph": [0.1, 0.3]},
        ],
    )
    ledger = tmp_path / "shared.duckdb"
    code1, _ = run_campaign(sim, tmp_path, name="first", fleet=2, ledger=ledger, extra=SIZED)
    assert code1 == 0
    led = Ledger(ledger)
    try:
        first = led.query(
            "SELECT machine_id, dud, jobs_finished, gpu_dph FROM instances "
            "WHERE campaign = 'first' AND coalesce(failure_class, '') <> 'cancelled'"
        ).rows
        dead = {m for m, dud, _, _ in first if dud}
        delivered = {m: dph for m, dud, done, dph in first if done}
        assert dead and delivered, first  # the first campaign met both kinds
        # each create kept the score its offer listed, for the record's fit
        assert all(r.listed_reliability is not None for r in led.rentals())

        # what the second campaign's offer book reads before it rents anything: the first's
        # record, every rental of the ledger, as of the market's clock
        book = OfferBook(
            SimpleNamespace(now=sim.market.clock.now),  # type: ignore[arg-type]
            led,
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            DEFAULT,
        )
        jobs = [Job("next", "true", ref_gpu="RTX 4090", ref_hours=0.3)]
        work = book.work_outlook(jobs, 2)
        assert work is not None and work.memory is not None
        for machine, dph in delivered.items():
            proven = _offer(1, machine, "RTX 3090", dph)
            stranger = _offer(2, 10_000_000, "RTX 3090", dph)
            ranked = rank_by_work([stranger, proven], book.history(), work)
            assert ranked[0][0] is proven, ranked
        for machine in dead:
            assert work.memory.odds("RTX 3090", 0.2, machine, None, 8.0) < work.memory.odds(
                "RTX 3090", 0.2, 10_000_000, None, 8.0
            )
    finally:
        led.close()

    code2, _ = run_campaign(sim, tmp_path, name="second", fleet=2, ledger=ledger, extra=SIZED)
    assert code2 == 0
    led = Ledger(ledger)
    try:
        second = {
            m
            for (m,) in led.query("SELECT machine_id FROM instances WHERE campaign = 'second'").rows
        }
        reused = {
            e.machine_id
            for e in led.events(where="kind = 'start' AND campaign = 'second'")
            if e.machine_id is not None
        }
    finally:
        led.close()
    assert second or reused  # the second campaign had hosts to do its work on
    assert not (second & dead), "a machine the first campaign found dead was rented again"
