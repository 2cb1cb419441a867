"""The campaign receipt (the article's table), from the ledger's `tenures` view added up by
`core.figures.summarize`, and its rendering."""

from __future__ import annotations

from typing import Any

import duckdb

from ..core.figures import Tenure, summarize
from ..core.text import clean

RECEIPT_KEYS = (
    "campaign",
    "creates",
    "reused",
    "duds",
    "dud_share",
    "dud_usd",
    "dud_mean_lifetime_min",
    "verified",
    "gpu_hours",
    "jobs_finished",
    "total_usd",
    "usd_per_gpu_hour",
    "creates_per_gpu_hour",
)


def compute_receipt(
    con: duckdb.DuckDBPyConnection, campaign: str | None = None
) -> list[dict[str, Any]]:
    """Each campaign's receipt: its tenures read from the `tenures` view, added up by
    `core.figures.summarize`, the same code that adds up the dashboard's live figures."""
    where = " WHERE campaign = ?" if campaign else ""
    params = [campaign] if campaign else []
    cur = con.execute(
        "SELECT campaign, created, verified_at IS NOT NULL, "
        "abandoned_at IS NOT NULL OR destroyed_at IS NOT NULL, gpu_hours, total_usd, "
        f"lifetime_min, jobs_finished, failure_class FROM tenures{where} "
        "ORDER BY campaign, instance_id",
        params,
    )
    by_campaign: dict[str, list[Tenure]] = {}
    for camp, created, verified, gone, hours, usd, life, jobs, cls in cur.fetchall():
        by_campaign.setdefault(camp, []).append(
            Tenure(
                created=bool(created),
                verified=bool(verified),
                gone=bool(gone),
                gpu_hours=float(hours or 0.0),
                total_usd=float(usd or 0.0),
                lifetime_min=float(life or 0.0),
                jobs_finished=int(jobs or 0),
                failure_class=clean(cls, 60) if cls else None,
            )
        )
    out = []
    for camp, tenures in by_campaign.items():
        r = summarize(clean(camp, 120), tenures)  # a campaign file's name: shown everywhere
        out.append(r)
    return out


def format_receipt(r: dict[str, Any]) -> list[tuple[str, str]]:
    """Label/value lines of one campaign's receipt, as the table shows them (text cleaned
    again here: a receipt dict may come from elsewhere than `compute_receipt`)."""
    per_h = r.get("usd_per_gpu_hour")
    lines = [
        ("campaign", clean(r["campaign"], 120)),
        ("instance creates", str(r["creates"])),
        ("proven rentals reused", str(r.get("reused", 0))),
        ("never delivered", f"{r['duds']} ({r['dud_share']:.0%})"),
        ("USD billed on them", f"${r['dud_usd']:.2f}"),
        ("mean dead-host lifetime", f"{r['dud_mean_lifetime_min']:.1f} min"),
        ("verified instances", str(r["verified"])),
        ("GPU-hours delivered", f"{r['gpu_hours']:.2f}"),
        ("jobs finished", str(r["jobs_finished"])),
        ("USD spent in all", f"${r['total_usd']:.2f}"),
        ("USD per delivered GPU-hour", f"${per_h:.3f}" if per_h is not None else "-"),
    ]
    cph = r.get("creates_per_gpu_hour")
    if cph is not None:
        lines.append(("creates per GPU-hour of work", f"{cph:.1f}"))
    for cls, n in sorted(r["by_class"].items(), key=lambda kv: -kv[1]):
        lines.append((f"  failed: {clean(cls, 60)}", str(n)))
    return lines
