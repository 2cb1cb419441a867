"""Our record of hosts, for ranking offers: per rental, what it delivered (a row of
`RENTAL_RECORD_SQL` is a `core.offers.track_record.Rental`, its fields in order). An attempt
given up for the campaign's fault or cancelled says nothing of its host."""

from __future__ import annotations

# the rentals that are evidence of their host (this ledger's, or the team's in its `mates` schema)
EVIDENCE = """instance_id NOT IN (
  SELECT instance_id FROM events WHERE kind = 'abandon' AND instance_id IS NOT NULL
    AND (detail->>'blame' IS NOT NULL OR detail->>'class' = 'cancelled'))"""


def _finite(expr: str) -> str:
    """`expr` where it is a market number (finite, not negative), else 0, as `core.rows.finite`
    reads one: a teammate's figures are any controller's to write."""
    return f"CASE WHEN isfinite({expr}) AND {expr} >= 0 THEN {expr} ELSE 0 END"


# one row per rental that is evidence of its host, every campaign: what it delivered (jobs
# finished, reference GPU-hours), the jobs it lost for its host's fault (not an outbid, whose
# count is kept apart), whether it throttled, dated by its last event; the reliability its
# offer listed when it was rented; and, for a proven rental its machine was quarantined from
# (its container exited, SSH went silent), the minutes from its create to that quarantine. The columns of the `instances` view it needs, read from the
# events and `instance_charges` alone: on a campaign's ledger a read's CPU is DuckDB binding,
# planning and setting up the view tree, not rows, and the `instances` view adds its delivered
# hours, delivery ends and clocks (about 1.6x the CPU); the swap watch reads this every market
# minute after an event. tests/test_record_reads.py holds it equal to the view.
RENTAL_RECORD_SQL = f"""
WITH c AS (
  SELECT instance_id, any_value(machine_id) AS machine_id, any_value(host_id) AS host_id,
         any_value(gpu_name) AS gpu_name, any_value(gpu_dph) AS gpu_dph, min(ts) AS created_at,
         any_value(TRY_CAST(detail->>'reliability' AS DOUBLE)) AS listed
  FROM events WHERE kind = 'create' AND phase <> 'intent' AND ok AND instance_id IS NOT NULL
  GROUP BY instance_id
), e AS (
  SELECT instance_id,
    min(ts) FILTER (WHERE kind = 'preflight_passed') AS verified_at,
    min(ts) FILTER (WHERE kind = 'abandon') AS abandoned_at,
    arg_min(detail->>'class', seq) FILTER (WHERE kind = 'abandon') AS failure_class,
    min(ts) FILTER (WHERE kind IN ('destroy', 'lost') AND phase <> 'intent' AND ok) AS destroyed_at,
    count(*) FILTER (WHERE kind = 'job_finished' AND ok AND seq NOT IN (SELECT seq FROM voided_exits))
      AS jobs_finished,
    count(*) FILTER (WHERE kind = 'job_finished' AND NOT ok
                     AND coalesce(TRY_CAST(detail->>'host_fault' AS BOOLEAN), false)) AS jobs_lost,
    coalesce(sum(TRY_CAST(detail->>'work_ref_h' AS DOUBLE)) FILTER (WHERE kind = 'job_finished' AND ok
      AND seq NOT IN (SELECT seq FROM voided_exits)), 0) AS work_ref_h,
    count(*) FILTER (WHERE kind = 'outbid') AS outbids,
    bool_or(kind = 'throttle') AS throttled,
    min(ts) FILTER (WHERE kind = 'quarantine') AS quarantined_at,
    max(ts) AS last_at
  FROM standing_events WHERE instance_id IS NOT NULL GROUP BY instance_id
)
SELECT c.machine_id, c.host_id, c.gpu_name, {_finite("c.gpu_dph")},
       {_finite("coalesce(e.last_at, c.created_at)")}, e.verified_at IS NOT NULL,
       -- as the `instances` view's dud (core.lifecycle.is_dud)
       e.verified_at IS NULL AND (e.abandoned_at IS NOT NULL OR e.destroyed_at IS NOT NULL)
         AND coalesce(e.failure_class, '') <> 'cancelled',
       {_finite("coalesce(ch.gpu_usd, 0) + coalesce(ch.storage_usd, 0)")},
       {_finite("(coalesce(e.destroyed_at, e.abandoned_at, e.last_at) - c.created_at) / 60")},
       e.jobs_finished, e.jobs_lost, {_finite("e.work_ref_h")}, e.outbids, e.throttled,
       -- a listed reliability is a number in [0, 1], else none
       CASE WHEN c.listed BETWEEN 0 AND 1 THEN c.listed END,
       CASE WHEN e.verified_at IS NOT NULL AND e.quarantined_at IS NOT NULL
         THEN (e.quarantined_at - c.created_at) / 60 END
FROM c JOIN e USING (instance_id) LEFT JOIN instance_charges ch USING (instance_id)
WHERE c.machine_id IS NOT NULL AND c.gpu_name IS NOT NULL AND {EVIDENCE}
"""

# machine id -> the mean share of its model's speed its jobs got there, over every machine
# rented (a create that happened): the `hosts` view's speed_share, without the view's join of
# `instances` and its billing, which it does not need (a tenth of the CPU or less)
SPEEDS_SQL = """
SELECT machine_id, avg(TRY_CAST(detail->>'speed_share' AS DOUBLE)) FILTER (WHERE kind = 'job_finished')
FROM events
WHERE machine_id IN (
  SELECT any_value(machine_id) FROM events
  WHERE kind = 'create' AND phase <> 'intent' AND ok AND instance_id IS NOT NULL
  GROUP BY instance_id)
GROUP BY machine_id
"""
