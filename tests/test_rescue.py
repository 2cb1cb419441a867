"""A moved job keeps the work it did after its last pulled checkpoint: the outbid rental keeps
its disk, rentwatch asks the market to copy the job's state off it onto the next host, and the
job starts there from that state (the simulator's truth), not from the older pulled copy."""

from __future__ import annotations

from rentwatch.ledger import Ledger

from .campaigns import checkpointing_jobs, run_campaign

# three jobs of 45 market minutes on a fleet of three: on this market one is outbid after a
# checkpoint and its copy lands, 70 market minutes in all (each minute played costs CPU)
N_JOBS = 3
JOBS = checkpointing_jobs(N_JOBS, every_min=30, retries=2, ref_hours=0.75)


def test_a_moved_job_starts_from_the_state_copied_off_its_paused_rental(
    make_sim, tmp_path, monkeypatch
):
    """A campaign on a bid market whose outbids last (on-demand rivals, holds of 2-4 h, no
    drift of the floor): an outbid rental stays paused, so its job moves to another host. On
    the stepped clock the market's moves do not depend on how fast the box runs, so on this
    market a copy lands, always."""
    monkeypatch.chdir(tmp_path)
    sim = make_sim(
        seed=21,
        offers=40,
        stepped=True,
        host_class=[
            {"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "dph": [0.35, 0.5]}
        ],
        bids={
            "pressure": 0.6,
            "ondemand": 0.5,
            "drift": 0.0,
            "day_swing": 0.0,
            "hold_min": [120, 240],
        },
        ssh={"direct_share": 1.0},  # a copy comes only off a host with open ports
    )
    extra = 'rental = "interruptible"\n' + JOBS
    code, path = run_campaign(sim, tmp_path, "default", name="rescue", fleet=3, extra=extra)
    assert code == 0
    led = Ledger(path)
    done = [e.detail["job"] for e in led.events(where="kind = 'job_finished' AND ok")]
    assert sorted(set(done)) == [f"j{i}" for i in range(N_JOBS)]
    for name in {n for n in done if done.count(n) > 1}:
        # run to the end twice only when the first run's output never came off its host (an
        # outbid paused it before the pull, as on a loaded machine): requeued, not lost
        events = led.events(where="kind IN ('artifacts', 'job_finished')")
        mine = [e for e in events if e.detail.get("job") == name]
        assert any(e.kind == "artifacts" and not e.ok for e in mine), name
        assert any(e.detail.get("requeued") for e in mine), name
    rescues = led.events(where="kind = 'rescued'")
    landed = [e for e in rescues if e.detail["stage"] == "landed" and e.ok]
    assert landed, "no copy landed: the test proves nothing"
    launches = sim.call(sim.market.truth)["jobs"]
    started_from_copy = 0
    for ev in landed:
        job, src = ev.detail["job"], ev.detail["source"]
        # its last launch on the paused rental (a rental resumed may have run it twice)
        there = max(
            (
                j
                for j in launches
                if j["job"] == job and j["instance_id"] == src and j["started_at"] < ev.at
            ),
            key=lambda j: j["started_at"],
        )
        after = [
            j
            for j in launches
            if j["job"] == job and j["instance_id"] == ev.instance_id and j["started_at"] >= ev.at
        ]
        if not after:  # only where that host left service (an outbid) before the launch
            left = led.events(where=f"kind = 'job_finished' AND instance_id = {ev.instance_id}")
            assert any(e.detail.get("requeued") and e.at >= ev.at for e in left), (
                "the job never started on the host its state was copied to"
            )
            continue
        # it starts from all the work it did on the paused rental, not from the last pull
        assert abs(after[0]["resumed_ref_h"] - there["work_ref_h"]) < 0.002
        started_from_copy += 1
    assert started_from_copy, "no moved job started where its state was copied to"
    # the receipt's work lost to interruptions nets out what the copies took back
    raw = sum(e.detail["work_lost_s"] or 0 for e in led.events(where="kind = 'outbid'"))
    kept = sum(e.detail["work_kept_s"] for e in landed)
    r = led.receipt()[0]
    assert r["work_lost_interrupt_min"] == round(max(0.0, raw - kept) / 60, 3)
