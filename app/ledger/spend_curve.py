"""The campaign's spend over time, duds apart, from the ledger's `billing_spans`, so the curve ends
where the receipt's spend does. One SELECT, for the file and a controller's query API alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def spend_curve_sql(campaign: str, points: int) -> str:
    """`points` moments evenly from the campaign's first billing mark to the ledger's clock,
    each with what duds and the other rentals had cost by then (USD, cumulative)."""
    c, n = _text(campaign), max(1, int(points))
    return f"""
WITH s AS (
  SELECT instance_id, ts, span_s,
    ((CASE WHEN gpu_on THEN gpu_dph ELSE 0 END)
     + (CASE WHEN storage_on THEN storage_dph ELSE 0 END)) / 3600 AS rate
  FROM billing_spans WHERE campaign = {c}
), d AS (
  SELECT instance_id, bool_or(dud) AS dud FROM tenures WHERE campaign = {c} GROUP BY 1
), b AS (
  SELECT min(ts) AS t0, greatest(max(ts + span_s), min(ts)) AS t1 FROM s
), g AS (
  SELECT i, t0 + (t1 - t0) * i / {n} AS t FROM b, range(1, {n + 1}) r(i) WHERE t0 IS NOT NULL
)
SELECT g.i, g.t,
  coalesce(sum(CASE WHEN coalesce(d.dud, false)
                    THEN s.rate * least(greatest(g.t - s.ts, 0), s.span_s) END), 0) AS dud_usd,
  coalesce(sum(CASE WHEN NOT coalesce(d.dud, false)
                    THEN s.rate * least(greatest(g.t - s.ts, 0), s.span_s) END), 0) AS other_usd
FROM g CROSS JOIN s LEFT JOIN d USING (instance_id)
GROUP BY g.i, g.t ORDER BY g.i
"""


@dataclass(frozen=True)
class SpendPoint:
    at: float  # market time
    dud_usd: float  # spent by then on attempts that never delivered
    other_usd: float  # spent by then on everything else (verified rentals, delivering work)

    @classmethod
    def from_row(cls, r: dict[str, Any]) -> SpendPoint:
        return cls(float(r["t"]), float(r["dud_usd"] or 0), float(r["other_usd"] or 0))
