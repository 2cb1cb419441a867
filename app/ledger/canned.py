"""The ledger screen's canned queries: SQL a person runs one key away (F2..F6) and edits, over
the ledger's views; kept with the ledger's other SQL, never written in a widget."""

from __future__ import annotations

CANNED = {
    "1": ("receipt", "select * from receipt"),
    "2": (
        "duds by failure class",
        "select failure_class, count(*) n, round(sum(total_usd), 4) usd, "
        "round(avg(lifetime_min), 1) mean_min from instances where dud group by 1 order by n desc",
    ),
    "3": (
        "most expensive duds",
        "select instance_id, machine_id, gpu_name, failure_class, round(lifetime_min, 1) "
        "min, round(total_usd, 4) usd from instances where dud order by total_usd desc limit 20",
    ),
    "4": (
        "one machine's history",
        "select seq, time, kind, phase, actor, reason from timeline where machine_id = "
        "(select machine_id from instances order by created_at desc limit 1) order by seq",
    ),
    "5": (
        "throttled hosts",
        "select machine_id, host_id, count(*) n, max(reason) reason from events "
        "where kind = 'throttle' group by 1, 2 order by n desc",
    ),
}
