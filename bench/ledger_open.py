"""What the ledger costs each process that opens it, and each poll: CPU per open (a new file; a
new in-memory one, whose views are made each time too; one reopened by its writer, one opened
read-only as `rentwatch receipt` or `jobs` does), per clock tick (`Ledger.tick`, once a poll), and per record read after
an event (the swap watch's `rentals` and `machine_speeds`, each market minute once an event was
written), over the `instances` and `hosts` views as they were read before and by the named reads
now. CPU, not wall time: the box's load moves the wall.
Run: python -m bench.ledger_open [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rentwatch.ledger import Ledger

# the record reads over the `instances` and `hosts` views, which define them: what the named reads
# (ledger/records.py) read before, and must still answer (tests/test_record_reads.py)
VIEW_RENTALS = """
WITH j AS (
  SELECT instance_id,
    count(*) FILTER (WHERE kind = 'job_finished' AND NOT ok
                     AND coalesce(TRY_CAST(detail->>'host_fault' AS BOOLEAN), false)) AS jobs_lost,
    coalesce(sum(TRY_CAST(detail->>'work_ref_h' AS DOUBLE)) FILTER (WHERE kind = 'job_finished' AND ok
      AND seq NOT IN (SELECT seq FROM voided_exits)), 0) AS work_ref_h,
    count(*) FILTER (WHERE kind = 'outbid') AS outbids,
    bool_or(kind = 'throttle') AS throttled,
    min(ts) FILTER (WHERE kind = 'quarantine') AS quarantined_at,
    max(ts) AS last_at
  FROM standing_events WHERE instance_id IS NOT NULL GROUP BY instance_id
), s AS (
  SELECT instance_id, any_value(TRY_CAST(detail->>'reliability' AS DOUBLE)) AS listed
  FROM events WHERE kind = 'create' AND phase <> 'intent' AND ok AND instance_id IS NOT NULL
  GROUP BY instance_id
)
SELECT i.machine_id, i.host_id, i.gpu_name, coalesce(i.gpu_dph, 0), coalesce(j.last_at, i.created_at),
       i.verified_at IS NOT NULL, i.dud, i.total_usd, coalesce(i.lifetime_min, 0),
       i.jobs_finished, coalesce(j.jobs_lost, 0), coalesce(j.work_ref_h, 0),
       coalesce(j.outbids, 0), coalesce(j.throttled, false),
       CASE WHEN s.listed BETWEEN 0 AND 1 THEN s.listed END,
       CASE WHEN i.verified_at IS NOT NULL AND j.quarantined_at IS NOT NULL
         THEN (j.quarantined_at - i.created_at) / 60 END
FROM instances i LEFT JOIN j USING (instance_id) LEFT JOIN s USING (instance_id)
WHERE i.machine_id IS NOT NULL AND i.gpu_name IS NOT NULL AND i.instance_id NOT IN (
  SELECT instance_id FROM events WHERE kind = 'abandon' AND instance_id IS NOT NULL
    AND (detail->>'blame' IS NOT NULL OR detail->>'class' = 'cancelled'))
"""
VIEW_SPEEDS = "SELECT machine_id, speed_share FROM hosts"


def campaign_ledger(led: Ledger, rentals: int = 14) -> None:
    """A sized campaign's ledger, as the referee's leaves one (about 175 events for 14 rentals):
    duds that never booted, and rentals proven that ran jobs, the last one still running."""
    at = 0.0
    for i in range(rentals):
        iid, ctx = 1000 + i, {"campaign": "c", "machine_id": 50 + i}
        s = led.intent(
            "create",
            at=at,
            actor="rule:b",
            reason="r",
            gpu_name="RTX 4090",
            gpu_dph=0.3 + i / 100,
            storage_dph=0.01,
            host_id=i,
            **ctx,
        )
        led.outcome(s, at=at, ok=True, instance_id=iid, detail={"reliability": 0.95})
        for status in ("loading", "running"):
            at += 60
            led.record(
                "status",
                at=at,
                actor="engine",
                reason="r",
                instance_id=iid,
                detail={"status": status},
                **ctx,
            )
        if i % 3 == 0:  # a dud
            led.record(
                "abandon",
                at=at + 60,
                actor="rule:b",
                reason="r",
                instance_id=iid,
                detail={"class": "boot_timeout"},
                **ctx,
            )
        else:
            led.record(
                "preflight_passed", at=at + 60, actor="engine", reason="r", instance_id=iid, **ctx
            )
            for job in range(3):
                at += 300
                done = {"job": f"j{i}-{job}", "work_ref_h": 0.2, "speed_share": 0.9}
                led.record(
                    "job_started",
                    at=at,
                    actor="engine",
                    reason="r",
                    instance_id=iid,
                    detail={"job": done["job"]},
                    **ctx,
                )
                led.record(
                    "job_finished",
                    at=at + 200,
                    actor="engine",
                    reason="r",
                    ok=True,
                    instance_id=iid,
                    detail=done,
                    **ctx,
                )
        if i < rentals - 1:
            s = led.intent(
                "destroy", at=at + 120, actor="rule:b", reason="r", instance_id=iid, **ctx
            )
            led.outcome(s, at=at + 120, ok=True)
    led.tick(at + 600)


def cpu_ms(fn: Callable[[int], object], repeat: int) -> float:
    """Median CPU milliseconds of one call."""
    got = []
    for i in range(repeat):
        c0 = time.process_time()
        fn(i)
        got.append(time.process_time() - c0)
    return statistics.median(got) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "l.duckdb"
        with Ledger(path) as led:
            for i in range(100):
                led.record("note", at=float(i), actor="engine", reason="fill", campaign="c")
        cases: list[tuple[str, Callable[[int], object]]] = [
            ("open a new ledger", lambda i: Ledger(Path(d) / f"n{i}.duckdb").close()),
            ("open a new :memory:", lambda i: Ledger(":memory:").close()),
            ("reopen by its writer", lambda i: Ledger(path).close()),
            ("open read-only", lambda i: Ledger(path, read_only=True).close()),
        ]
        for what, fn in cases:
            print(f"{what:>22}: {cpu_ms(fn, args.repeat):6.1f} ms CPU (median)")
        with Ledger(path) as led:
            tick = cpu_ms(lambda i: led.tick(1000.0 + i, "http://market"), args.repeat * 5)
        print(f"{'a poll clock tick':>22}: {tick:6.1f} ms CPU (median)")
    with Ledger(":memory:") as led:
        campaign_ledger(led)
        n = len(led.events())

        def views(_: int) -> None:
            led._rows(VIEW_RENTALS)
            led._rows(VIEW_SPEEDS)

        def named(i: int) -> None:
            led.record("note", at=1e6 + i, actor="engine", reason="an event: read afresh")
            led.rentals()
            led.machine_speeds()

        print(f"\nthe swap watch's record reads after an event ({n} events), CPU (median):")
        was, now = cpu_ms(views, args.repeat), cpu_ms(named, args.repeat)
        print(f"{'over the views':>22}: {was:6.1f} ms")
        print(f"{'the named reads':>22}: {now:6.1f} ms (ratio {now / was:.2f})")


if __name__ == "__main__":
    main()
