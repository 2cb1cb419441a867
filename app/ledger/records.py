"""Our record per GPU model, for ranking offers by delivered work (`core.work_cost`): how many
of its rentals delivered, how many were duds, and how long its duds lived before the rules
caught them. Counted as `Ledger.machine_record` counts a machine: an attempt given up for the
campaign's fault (its abandon names a `blame`) or cancelled says nothing of its host."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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


def model_rows(rows: Iterable[tuple[Any, ...]]) -> dict[str, tuple[int, int, float]]:
    """GPU model (as offers name it) -> (delivered, duds, minutes its duds lived in all)."""
    return {str(g): (int(d or 0), int(b or 0), float(m or 0)) for g, d, b, m in rows}
