"""The reads the dashboard's screens make of the ledger, each a named function over anything that
answers `query(sql, limit=)` (the file, or a controller's query API), so no SQL is in a widget."""

from __future__ import annotations

from typing import Any

from .spend_curve import SpendPoint, spend_curve_sql

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


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def clock_of(ledger: Any, campaign: str) -> float | None:
    """The ledger's clock for `campaign` (its market's last poll; the ledger's own clock where
    the campaign kept none): the moment a receipt is "as of"."""
    rows = ledger.query(
        f"select coalesce((select now from campaign_clocks where campaign = {_text(campaign)}), "
        "(select now from ledger_clock))",
        limit=1,
    ).rows
    return float(rows[0][0]) if rows and rows[0][0] else None


def hosts_record(ledger: Any) -> Any:
    """The hosts' renter-side delivery record, worst first (a query result: columns, rows)."""
    return ledger.query(HOSTS_SQL, limit=HOSTS_SHOWN)


def spend_points(ledger: Any, campaign: str, points: int) -> list[SpendPoint]:
    """The campaign's spend curve at `points` moments (spend_curve.py)."""
    got = ledger.query(spend_curve_sql(campaign, points), limit=1000)
    return [SpendPoint.from_row(dict(zip(got.columns, r, strict=True))) for r in got.rows]
