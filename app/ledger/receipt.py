"""The campaign receipt (the article's table), from the ledger's `tenures` view added up by
`core.figures.summarize`, and its rendering."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import duckdb

from ..core.figures import Tenure, summarize
from ..core.text import clean

# The interruptible tier's outbids: each `outbid` event carries the work that outbid cost
# (`detail.work_lost_s`: the time since the last checkpoint that came off the box), less what
# a copy off the paused rental took back (`rescued` events, `detail.work_kept_s`).
_TIER_SQL = """
SELECT coalesce(campaign, ''),
       count(*) FILTER (WHERE kind = 'outbid'),
       sum(TRY_CAST(detail->>'work_lost_s' AS DOUBLE)) FILTER (WHERE kind = 'outbid'),
       sum(TRY_CAST(detail->>'work_kept_s' AS DOUBLE)) FILTER (WHERE kind = 'rescued' AND ok),
       count(*) FILTER (WHERE kind = 'outbid' AND detail->>'work_lost_s' IS NOT NULL)
FROM events WHERE kind IN ('outbid', 'rescued') {c} GROUP BY 1
"""

# The bid rentals: an instance is on the tier when its create says the bid (`detail.bid`, the
# price it was created with; Vast's rental type cannot change after the create), whichever
# campaign holds it later. With each, its on-demand price (`detail.on_demand_dph`, the offer's
# `gpu_dph`; NULL where a ledger older than the figure did not say), at which
# `usd_all_on_demand` prices its billed GPU hours. Per campaign: what its bid tenures cost, their
# billed GPU hours, GPU dollars, those hours at on-demand prices, and whether every price is known.
_BIDS_SQL = """
WITH b AS (
  SELECT instance_id, max(TRY_CAST(detail->>'on_demand_dph' AS DOUBLE)) AS price FROM events
  WHERE kind = 'create' AND instance_id IS NOT NULL AND detail->>'bid' IS NOT NULL GROUP BY 1
)
SELECT campaign, sum(total_usd), sum(coalesce(gpu_billed_h, 0)), sum(coalesce(gpu_usd, 0)),
       sum(coalesce(gpu_billed_h, 0) * coalesce(price, 0)), bool_and(price IS NOT NULL)
FROM tenures JOIN b USING (instance_id) {where} GROUP BY campaign
"""


def tier_figures(
    row: tuple[Any, ...] | None,
    on_demand: float,
    on_bids: float,
    as_on_demand: tuple[Any, ...] | None = None,
) -> dict[str, Any]:
    """A campaign's spend by tier, its interruptions and the minutes they cost, from its `_TIER_SQL`
    row (None: none); and what the same work would have cost on-demand: the bids' GPU hours less
    the work outbids threw away, at on-demand prices (None where a create did not record its
    on-demand price)."""
    _, outbids, lost_s, kept_s, of_jobs = row or ("", 0, 0, 0, 0)
    lost = max(0.0, float(lost_s or 0.0) - float(kept_s or 0.0))
    total = on_demand + on_bids
    hours, bid_gpu, od_gpu, known = as_on_demand or (0, 0, 0, True)
    hours, bid_gpu, od_gpu = (float(v or 0.0) for v in (hours, bid_gpu, od_gpu))
    kept_h = max(0.0, hours - lost / 3600)
    same = total - bid_gpu + (od_gpu / hours * kept_h if hours > 0 else 0.0)
    return {
        "usd_on_demand": round(on_demand, 6),
        "usd_interruptible": round(on_bids, 6),
        "interruptions": int(outbids or 0),
        "interruptions_of_jobs": int(of_jobs or 0),  # those that cost a running job its work
        "work_lost_interrupt_min": round(lost / 60, 3),
        "usd_all_on_demand": round(same, 6) if known else None,
    }


# Sized jobs (docs/campaigns.md): the reference GPU-hours of each job finished once (its last
# good finish that stands, `job_exits`), the work lost when a host left mid-job, and the work
# throttling took: the time a throttled host's jobs ran, times the share of its model's speed
# they did not get, in reference hours (a finished job's delivered speed against its model's).
_WORK_SQL = """
WITH fin AS (
  SELECT coalesce(campaign, '') AS campaign, detail->>'job' AS job,
         arg_max(TRY_CAST(detail->>'work_ref_h' AS DOUBLE), seq) AS h
  FROM job_exits WHERE detail->>'work_ref_h' IS NOT NULL {c}
  GROUP BY 1, 2
), done AS (
  SELECT campaign, sum(h) AS done FROM fin GROUP BY 1
), lost AS (
  SELECT coalesce(campaign, '') AS campaign,
         sum(TRY_CAST(detail->>'work_lost_ref_h' AS DOUBLE)) AS lost
  FROM events WHERE kind = 'job_finished' AND detail->>'work_lost_ref_h' IS NOT NULL {c}
  GROUP BY 1
), thr AS (
  SELECT coalesce(campaign, '') AS campaign,
         sum(TRY_CAST(detail->>'work_ref_h' AS DOUBLE)
             * greatest(0, 1 / least(1, TRY_CAST(detail->>'speed_share' AS DOUBLE)) - 1)) AS thr
  FROM job_exits WHERE TRY_CAST(detail->>'speed_share' AS DOUBLE) > 0
    AND instance_id IN (SELECT instance_id FROM events WHERE kind = 'throttle') {c}
  GROUP BY 1
), k AS (SELECT campaign FROM done UNION SELECT campaign FROM lost UNION SELECT campaign FROM thr)
SELECT k.campaign, done, lost, thr FROM k
LEFT JOIN done USING (campaign) LEFT JOIN lost USING (campaign) LEFT JOIN thr USING (campaign)
"""


def work_figures(row: tuple[Any, ...] | None, total_usd: float) -> dict[str, Any]:
    """A campaign's work in reference GPU-hours and its cost per hour, from its `_WORK_SQL` row."""
    done, lost, throttled = (float(v or 0.0) for v in (row or ("", 0, 0, 0))[1:])
    return {
        "work_done": round(done, 6),
        "usd_per_work_hour": round(total_usd / done, 4) if done > 0 else None,
        "work_lost_throttle": round(throttled, 6),
        "work_lost_host": round(lost, 6),
    }


def compute_receipt(
    con: duckdb.DuckDBPyConnection, campaign: str | None = None
) -> list[dict[str, Any]]:
    """Each campaign's receipt: its tenures from the `tenures` view, added up by
    `core.figures.summarize` as the dashboard's are. Each view is read once for all campaigns,
    not once per campaign."""
    where = " WHERE campaign = ?" if campaign else ""
    c = "AND campaign = ?" if campaign else ""
    params = [campaign] if campaign else []
    rows = con.execute(
        "SELECT campaign, created, verified_at IS NOT NULL, "
        "abandoned_at IS NOT NULL OR destroyed_at IS NOT NULL, coalesce(gpu_hours, 0), "
        "total_usd, lifetime_min, jobs_finished, failure_class, market_stopped "
        f"FROM tenures{where} "
        "ORDER BY campaign, instance_id",
        params,
    ).fetchall()  # before the next execute: the connection holds one result at a time
    by_campaign: dict[str, list[Tenure]] = {}
    for camp, *fields in rows:
        t = Tenure(*fields)  # the rest of the row: Tenure's fields in order
        cls = t.failure_class and clean(t.failure_class, 60)
        by_campaign.setdefault(camp, []).append(replace(t, failure_class=cls))
    bids = {r[0]: r[1:] for r in con.execute(_BIDS_SQL.format(where=where), params).fetchall()}
    work = {r[0]: r for r in con.execute(_WORK_SQL.format(c=c), params * 3).fetchall()}
    tier = {r[0]: r for r in con.execute(_TIER_SQL.format(c=c), params).fetchall()}
    out = []
    for camp, tenures in by_campaign.items():
        r = summarize(clean(camp, 120), tenures)  # a campaign file's name: shown everywhere
        total = float(r["total_usd"])
        r.update(work_figures(work.get(camp), total))
        bid = bids.get(camp)
        bid_usd = float(bid[0] or 0.0) if bid else 0.0
        r.update(tier_figures(tier.get(camp), total - bid_usd, bid_usd, bid[1:] if bid else None))
        out.append(r)
    return out


def usd(x: float) -> str:
    """A receipt's USD, to the tenth of a cent the fleet header shows: a campaign's first
    minutes bill a fraction of a cent, and "$0.00" lost on duds read as nothing lost."""
    return f"${x:.3f}"


def format_receipt(r: dict[str, Any]) -> list[tuple[str, str]]:
    """Label/value lines of one campaign's receipt, as the table shows them (text cleaned
    again here: a receipt dict may come from elsewhere than `compute_receipt`)."""
    per_h = r.get("usd_per_gpu_hour")
    lifetime = f"{r['dud_mean_lifetime_min']:.1f} min" if r["duds"] else "-"
    lines = [
        ("campaign", clean(r["campaign"], 120)),
        ("instance creates", str(r["creates"])),
        ("proven rentals reused", str(r.get("reused", 0))),
        ("never delivered (host)", f"{r['duds']} ({r['dud_share']:.0%})"),
        ("USD billed on them", usd(r["dud_usd"])),
        ("mean dead-host lifetime", lifetime),
        # never delivered, and no fault of the host's: counted apart from the duds
        *[
            (label, str(r[key]))
            for key, label in (
                ("stopped_by_market", "never delivered (market)"),
                ("cancelled", "never delivered (cancelled)"),
            )
            if r.get(key)
        ],
        ("verified instances", str(r["verified"])),
        ("GPU-hours delivered", f"{r['gpu_hours']:.2f}"),
        ("jobs finished", str(r["jobs_finished"])),
        ("USD spent in all", usd(r["total_usd"])),
        ("USD per delivered GPU-hour", f"${per_h:.3f}" if per_h is not None else "-"),
    ]
    if r.get("work_done"):
        per_w = r.get("usd_per_work_hour")
        lines += [
            ("work done (reference GPU-hours)", f"{r['work_done']:.2f}"),
            ("USD per reference GPU-hour", f"${per_w:.3f}" if per_w is not None else "-"),
            ("work lost to throttling", f"{r.get('work_lost_throttle', 0):.2f} ref-h"),
            ("work lost to hosts gone mid-job", f"{r.get('work_lost_host', 0):.2f} ref-h"),
        ]
    if r.get("usd_interruptible") or r.get("interruptions"):
        lost = r.get("work_lost_interrupt_min", 0.0)
        n, k = r.get("interruptions", 0), r.get("interruptions_of_jobs", 0)
        same = r.get("usd_all_on_demand")
        lines += [
            ("USD on-demand", usd(r.get("usd_on_demand", 0))),
            ("USD interruptible (bids)", usd(r.get("usd_interruptible", 0))),
            ("USD the same work all on-demand", usd(same) if same is not None else "-"),
            ("interruptions (outbid)", f"{n}" + (f" ({k} of a running job)" if k != n else "")),
            (
                "work lost to interruptions",
                f"{lost:.1f} min" + (f" ({lost / k:.1f} each)" if k else ""),
            ),
        ]
    cph = r.get("creates_per_gpu_hour")
    if cph is not None:
        lines.append(("creates per GPU-hour of work", f"{cph:.1f}"))
    for cls, n in sorted(r["by_class"].items(), key=lambda kv: -kv[1]):
        lines.append((f"  failed: {clean(cls, 60)}", str(n)))
    return lines


def print_receipts(receipts: list[dict[str, Any]]) -> None:
    """One table per campaign, as `rentwatch receipt` and a headless run's end print them."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    if not receipts:
        console.print("the ledger holds no creates yet")
    for r in receipts:
        table = Table(title=Text(f"receipt: {r['campaign']}"), show_header=False)
        table.add_column("what")
        table.add_column("figure", justify="right")
        for label, value in format_receipt(r):
            table.add_row(Text(label), Text(value))  # text, never markup
        console.print(table)
