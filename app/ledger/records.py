"""Our record of hosts, for ranking offers: per GPU model, rentals delivered, duds and how long duds
lived; per rental, what it delivered. An attempt given up for the campaign's fault or cancelled
says nothing of its host."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..core.offers.track_record import Rental

MODEL_RECORD_SQL = """
SELECT gpu_name,
       count(*) FILTER (WHERE verified_at IS NOT NULL) AS delivered,
       count(*) FILTER (WHERE dud) AS duds,
       coalesce(sum(lifetime_min) FILTER (WHERE dud), 0) AS dud_minutes
FROM instances
WHERE gpu_name IS NOT NULL AND instance_id NOT IN (
  SELECT instance_id FROM events WHERE kind = 'abandon' AND instance_id IS NOT NULL
    AND (detail->>'blame' IS NOT NULL OR detail->>'class' = 'cancelled'))
GROUP BY gpu_name
"""


# one row per rental that is evidence of its host, every campaign: what it delivered (jobs
# finished, reference GPU-hours), the jobs it lost for its host's fault (not an outbid, whose
# count is kept apart), whether it throttled, dated by its last event; and the reliability its
# offer listed when it was rented
RENTAL_RECORD_SQL = """
WITH j AS (
  SELECT instance_id,
    count(*) FILTER (WHERE kind = 'job_finished' AND NOT ok
                     AND coalesce(TRY_CAST(detail->>'host_fault' AS BOOLEAN), false)) AS jobs_lost,
    coalesce(sum(TRY_CAST(detail->>'work_ref_h' AS DOUBLE)) FILTER (WHERE kind = 'job_finished' AND ok
      AND seq NOT IN (SELECT seq FROM voided_exits)), 0) AS work_ref_h,
    count(*) FILTER (WHERE kind = 'outbid') AS outbids,
    bool_or(kind = 'throttle') AS throttled,
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
       coalesce(j.outbids, 0), coalesce(j.throttled, false), s.listed
FROM instances i LEFT JOIN j USING (instance_id) LEFT JOIN s USING (instance_id)
WHERE i.machine_id IS NOT NULL AND i.gpu_name IS NOT NULL AND i.instance_id NOT IN (
  SELECT instance_id FROM events WHERE kind = 'abandon' AND instance_id IS NOT NULL
    AND (detail->>'blame' IS NOT NULL OR detail->>'class' = 'cancelled'))
"""


def rental_rows(rows: Iterable[tuple[Any, ...]]) -> list[Rental]:
    """The ledger's rentals as `core.offers.track_record` reads them."""
    out = []
    for row in rows:
        m, h, g, dph, at, verified, dud, usd, life, done, lost, work, outbids, throttled, x = row
        out.append(
            Rental(
                machine_id=int(m),
                host_id=None if h is None else int(h),
                gpu_name=str(g),
                dph=float(dph or 0),
                at=float(at or 0),
                verified=bool(verified),
                dud=bool(dud),
                usd=float(usd or 0),
                lifetime_min=float(life or 0),
                jobs_finished=int(done or 0),
                jobs_lost=int(lost or 0),
                work_ref_h=float(work or 0),
                outbids=int(outbids or 0),
                throttled=bool(throttled),
                listed_reliability=_score(x),
            )
        )
    return out


def _score(x: Any) -> float | None:
    """A listed reliability as the record reads it: a finite number in [0, 1], else none."""
    if x is None:
        return None
    v = float(x)
    return v if 0.0 <= v <= 1.0 else None


def model_rows(rows: Iterable[tuple[Any, ...]]) -> dict[str, tuple[int, int, float]]:
    """GPU model (as offers name it) -> (delivered, duds, minutes its duds lived in all)."""
    return {str(g): (int(d or 0), int(b or 0), float(m or 0)) for g, d, b, m in rows}
