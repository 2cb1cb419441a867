"""The campaign receipt (the article's table), read from the `receipt` views, and its rendering."""

from __future__ import annotations

from typing import Any

import duckdb

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
    where = " WHERE campaign = ?" if campaign else ""
    params = [campaign] if campaign else []
    cur = con.execute(
        f"SELECT {', '.join(RECEIPT_KEYS)} FROM receipt{where} ORDER BY campaign", params
    )
    out: list[tuple[Any, dict[str, Any]]] = []
    for row in cur.fetchall():
        r = dict(zip(RECEIPT_KEYS, row, strict=True))
        raw_campaign = r["campaign"]
        r["campaign"] = clean(raw_campaign, 120)  # a campaign file's name: shown everywhere
        for k in ("dud_share", "dud_usd", "dud_mean_lifetime_min", "gpu_hours", "total_usd"):
            r[k] = float(r[k] or 0.0)
        for k in ("creates", "reused", "duds", "verified", "jobs_finished"):
            r[k] = int(r[k] or 0)
        r["by_class"] = {}
        out.append((raw_campaign, r))
    by = con.execute(
        f"SELECT campaign, failure_class, n FROM receipt_classes{where}", params
    ).fetchall()
    for camp, cls, n in by:
        for raw, r in out:
            if raw == camp:
                key = clean(cls, 60) if cls else "unclassified"
                r["by_class"][key] = r["by_class"].get(key, 0) + int(n)
    return [r for _, r in out]


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
