"""The reads the dashboard's screens make of the ledger, each a named function over anything that
answers `query(sql, limit=)` (the file, or a controller's query API), so no SQL is in a widget.

The spend curve is the campaign's spend over time, duds apart, from the ledger's `billing_spans`,
so it ends where the receipt's spend does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .job_reads import literal

HOSTS_SHOWN = 200

# p(deliver) with the prior of rentwatch.core.offers.reputation (mean 0.4, weight 2); short names:
# thirteen columns in 80 cells cut every header to "machi…"
HOSTS_SQL = (
    "select h.machine_id machine, h.host_id host, creates, booted, computed, "
    "finished, throttled, went_offline offline, duds, "
    "round((0.8 + computed) / (2 + computed + duds), 2) p_deliver, "
    "coalesce(failure_classes, '') classes, round(dud_usd, 4) dud_usd, "
    "q.machine_id is not null quarantined from hosts h "
    "left join quarantine q using (machine_id) order by duds desc, creates desc"
)


def spend_curve_sql(campaign: str, points: int) -> str:
    """`points` moments evenly from the campaign's first billing mark to the ledger's clock,
    each with what duds and the other rentals had cost by then (USD, cumulative)."""
    c, n = literal(campaign), max(1, int(points))
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


def clock_of(ledger: Any, campaign: str) -> float | None:
    """The ledger's clock for `campaign` (its market's last poll; the ledger's own clock where
    the campaign kept none): the moment a receipt is "as of"."""
    rows = ledger.query(
        f"select coalesce((select now from campaign_clocks where campaign = {literal(campaign)}), "
        "(select now from ledger_clock))",
        limit=1,
    ).rows
    return float(rows[0][0]) if rows and rows[0][0] else None


def hosts_record(ledger: Any) -> Any:
    """The hosts' renter-side delivery record, worst first (a query result: columns, rows)."""
    return ledger.query(HOSTS_SQL, limit=HOSTS_SHOWN)


def spend_points(ledger: Any, campaign: str, points: int) -> list[SpendPoint]:
    got = ledger.query(spend_curve_sql(campaign, points), limit=1000)
    return [SpendPoint.from_row(r) for r in got.as_dicts()]
