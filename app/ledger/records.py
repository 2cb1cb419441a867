"""Our record per machine and per GPU model, for ranking offers (`core.reputation`,
`core.work_cost`): how many of its rentals delivered, how many failed to, and what those cost
and how long they lived. An attempt given up for the campaign's fault (its abandon names a
`blame`) or cancelled says nothing of its host and is not counted.

A rental that passed its preflight and then left service before it finished a single job (the
host went `exited` or `offline`, stopped answering, or changed its host key: `LEFT_ACTORS`)
delivered nothing, and counts as a failure, not a delivery: it billed its boot, its preflight
and the minutes of work it threw away (a family market's `exited` A100s, verified and gone a
few minutes into their first job, each counted as a delivery and kept their model first in
the ranking)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

LEFT_ACTORS = ("rule:host_down", "rule:silent", "rule:host_key")

# each rental that says something of its host: delivered, or failed (a dud, or gone before it
# finished a job), with what a failure cost and how long it lived
RENTAL_OUTCOMES_SQL = f"""
WITH left_service AS (
  SELECT instance_id, min(ts) AS left_at FROM events
  WHERE kind = 'stop' AND actor IN {LEFT_ACTORS!r} AND instance_id IS NOT NULL
  GROUP BY instance_id
), outcome AS (
  SELECT i.*, l.left_at,
         i.verified_at IS NOT NULL AND i.jobs_finished = 0 AND l.left_at IS NOT NULL AS left_early
  FROM instances i LEFT JOIN left_service l USING (instance_id)
  WHERE i.instance_id NOT IN (
    SELECT instance_id FROM events WHERE kind = 'abandon' AND instance_id IS NOT NULL
      AND (detail->>'blame' IS NOT NULL OR detail->>'class' = 'cancelled'))
)
SELECT *, verified_at IS NOT NULL AND NOT left_early AS delivered, dud OR left_early AS failed,
       CASE WHEN left_early THEN (left_at - created_at) / 60 ELSE lifetime_min END AS failed_min
FROM outcome
"""

MACHINE_RECORD_SQL = f"""
SELECT machine_id, count(*) FILTER (WHERE delivered), count(*) FILTER (WHERE failed),
       avg(total_usd) FILTER (WHERE failed)
FROM ({RENTAL_OUTCOMES_SQL}) GROUP BY machine_id
"""

MODEL_RECORD_SQL = f"""
SELECT gpu_name, count(*) FILTER (WHERE delivered) AS delivered,
       count(*) FILTER (WHERE failed) AS duds,
       coalesce(sum(failed_min) FILTER (WHERE failed), 0) AS dud_minutes
FROM ({RENTAL_OUTCOMES_SQL}) WHERE gpu_name IS NOT NULL GROUP BY gpu_name
"""


def model_rows(rows: Iterable[tuple[Any, ...]]) -> dict[str, tuple[int, int, float]]:
    """GPU model (as offers name it) -> (delivered, duds, minutes its duds lived in all)."""
    return {str(g): (int(d or 0), int(b or 0), float(m or 0)) for g, d, b, m in rows}
