"""A campaign end to end on a simulated bid market: sized, checkpointing jobs under
`rental = "auto"` against rivals who outbid us. Every job is done once, every outbid is acted
on in the poll that saw it, no verified rental is destroyed by automation, and nothing that
resumed by itself is left billing at the end (the simulator's truth)."""

from __future__ import annotations

from rentwatch.ledger import Ledger

from .campaigns import checkpointing_jobs, run_campaign

JOBS = checkpointing_jobs(4, every_min=1, retries=1, ref_hours=0.75)
EXTRA = 'rental = "auto"\n' + JOBS


def test_a_campaign_on_the_bid_tier_keeps_its_work_and_leaks_nothing(
    make_sim, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    sim = make_sim(
        seed=28,
        offers=24,
        time_scale=600,
        host_class=[
            {"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "dph": [0.35, 0.5]}
        ],
        bids={"pressure": 1.0, "ondemand": 0.2, "day_swing": 0.0, "hold_min": [5, 30]},
    )
    code, path = run_campaign(sim, tmp_path, "default", name="bids", fleet=3, extra=EXTRA)
    assert code == 0
    led = Ledger(path)
    done = [e.detail["job"] for e in led.events(where="kind = 'job_finished' AND ok")]
    assert sorted(done) == [f"j{i}" for i in range(4)]  # each once: none lost, none twice
    creates = led.events(where="kind = 'create' AND phase = 'outcome' AND ok")
    bids = {e.instance_id for e in creates if e.detail.get("bid") is not None}
    assert bids  # auto bid where it paid
    outbids = led.events(where="kind = 'outbid'")
    assert outbids, "the market never outbid us: the test proves nothing"
    requeued = led.events(where="kind = 'job_finished' AND NOT ok")
    for ev in outbids:
        assert ev.instance_id in bids and ev.detail["bid"] is not None
        if ev.detail["job"] is not None:  # its job back in the queue in the same poll
            assert any(
                r.detail["job"] == ev.detail["job"] and r.at == ev.at and r.detail["requeued"]
                for r in requeued
            )
    # each outbid rental was acted on: rebid, resumed, moved on or stopped by us
    acted = led.events(
        where="kind IN ('rebid', 'moved', 'resumed', 'stop', 'destroy') AND actor <> 'market'"
    )
    for ev in outbids:
        assert any(a.instance_id == ev.instance_id and a.at >= ev.at for a in acted)
    verified = {e.instance_id for e in led.events(where="kind = 'preflight_passed'")}
    destroyed = led.events(where="kind = 'destroy' AND phase = 'outcome' AND ok")
    assert not [e for e in destroyed if e.instance_id in verified and e.actor != "human"]

    def leaks() -> list[int]:  # the truth: a paused bid rental resumes, and bills, by itself
        return [
            i.id
            for i in sim.market.instances.values()
            if i.destroyed_at is None and (i.paused_at is not None or i.intended == "running")
        ]

    assert sim.call(leaks) == []
    # a job moved off an outbid rental starts from the state its last pulled checkpoint held,
    # never from more than an earlier launch of it delivered (the simulator's truth)
    launches = sim.call(sim.market.truth)["jobs"]
    carried = [j for j in launches if j["resumed_ref_h"] > 0]
    # a job outbid after a checkpoint of it came off kept its work (on a loaded box an outbid
    # can come before the first pull: that job starts again from nothing, as it should)
    pulls = [
        (e.detail["job"], e.at)
        for e in led.events(where="kind = 'artifacts' AND ok")
        if e.detail.get("kind") == "checkpoint" and e.detail.get("files")
    ]
    if any(j == ev.detail["job"] and at < ev.at for ev in outbids for j, at in pulls):
        assert carried, "no launch resumed from a checkpoint"
    for j in carried:
        before = [b for b in launches if b["job"] == j["job"] and b["started_at"] < j["started_at"]]
        assert before and j["resumed_ref_h"] <= max(b["work_ref_h"] for b in before) + 1e-6
