"""What a campaign still holds, as the ledger knows it: every rental neither destroyed nor written
off, whether verified or stopped, its storage per day, and the jobs whose outputs are still on
it. One SELECT, so it answers through a controller's read-only query API as well as the file."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..core.text import clean
from .job_reads import literal


def holdings_sql(campaign: str) -> str:
    """The rentals `campaign` still holds, one row each (see the module's doc)."""
    c = literal(campaign)
    return f"""
WITH held AS (
  SELECT i.* FROM instances i
  WHERE i.destroyed_at IS NULL AND NOT coalesce(i.written_off, false)
    AND i.instance_id IN (SELECT instance_id FROM tenures WHERE campaign = {c})
), last_change AS (
  -- a resume by itself (a paused bid running again) is a start of the market's
  SELECT instance_id, arg_max(kind, seq) AS change, arg_max(actor, seq) AS change_actor
  FROM events WHERE phase <> 'intent' AND coalesce(ok, true)
    AND kind IN ('stop', 'start', 'create', 'resumed')
    AND instance_id IN (SELECT instance_id FROM held)
  GROUP BY instance_id
), bids AS (
  SELECT instance_id, bool_or(detail->>'bid' IS NOT NULL) AS bid
  FROM events WHERE kind = 'create' AND instance_id IN (SELECT instance_id FROM held)
  GROUP BY instance_id
), starts AS (
  -- a job whose start says it declares no artifacts has none to pull (older ledgers: unsaid)
  SELECT instance_id, campaign, detail->>'job' AS job, max(seq) AS started
  FROM events WHERE kind = 'job_started' AND instance_id IN (SELECT instance_id FROM held)
    AND coalesce(json_array_length(detail->'artifacts'), 1) > 0
  GROUP BY ALL
), pulled AS (
  SELECT s.instance_id, s.job,
    bool_or(a.seq IS NOT NULL) AS pulled,
    bool_or(f.seq IS NOT NULL) AS finished
  FROM starts s
  LEFT JOIN events f ON f.kind = 'job_finished' AND f.instance_id = s.instance_id
    AND f.detail->>'job' = s.job AND f.seq > s.started
  -- its output off this host after its end, or off another host after its start here: a try
  -- cut off here that a later try finished elsewhere has its output pulled
  LEFT JOIN events a ON a.kind = 'artifacts' AND a.ok AND a.detail->>'job' = s.job
    AND a.campaign IS NOT DISTINCT FROM s.campaign
    AND CASE WHEN a.instance_id = s.instance_id THEN a.seq > coalesce(f.seq, s.started)
             ELSE a.seq > s.started END
    -- a job's own output, not its checkpoint (by the pull's kind; before pulls said, by dest)
    AND coalesce(a.detail->>'kind', CASE WHEN coalesce(a.detail->>'dest', '') LIKE '%/checkpoint'
                                         THEN 'checkpoint' END, 'artifacts') = 'artifacts'
  GROUP BY ALL
)
SELECT h.instance_id, h.machine_id, coalesce(h.gpu_name, '?') AS gpu_name,
  h.verified_at IS NOT NULL AS verified,
  coalesce(l.change, 'create') = 'stop' AS stopped,
  -- a bid rental stopped by the market (outbid) or found stopped with nobody's stop seen:
  -- it resumes by itself unless we stop it (only our own stop ends a bid)
  coalesce(coalesce(l.change, 'create') = 'stop' AND coalesce(b.bid, false)
    AND l.change_actor IN ('market', 'reconcile'), false) AS paused,
  coalesce(h.storage_dph, 0) * 24 AS storage_usd_per_day,
  coalesce(h.gpu_dph, 0) AS gpu_usd_per_h, h.total_usd,
  coalesce((SELECT string_agg(p.job || CASE WHEN p.finished THEN '' ELSE ' (running)' END,
                              ', ' ORDER BY p.job)
            FROM pulled p WHERE p.instance_id = h.instance_id AND NOT p.pulled), '') AS unpulled
FROM held h LEFT JOIN last_change l USING (instance_id) LEFT JOIN bids b USING (instance_id)
ORDER BY h.instance_id
"""


@dataclass(frozen=True)
class Holding:
    instance_id: int
    machine_id: int | None
    gpu_name: str
    verified: bool
    stopped: bool
    storage_usd_per_day: float
    gpu_usd_per_h: float
    total_usd: float
    unpulled: str  # jobs that ran on it whose outputs were not pulled off ("" when none)
    paused: bool = False  # a bid rental the market stopped: it resumes unless we stop it

    @classmethod
    def from_row(cls, r: dict[str, Any]) -> Holding:
        """One row of `holdings_sql`, whose columns are these fields."""
        return cls(**{f.name: r[f.name] for f in fields(cls)})

    def line(self) -> str:
        """One line for a person deciding whether to destroy it."""
        state = (
            f"paused by the market (a bid: resumes by itself, ${self.gpu_usd_per_h:.3f}/h GPU)"
            if self.paused
            else "stopped"
            if self.stopped
            else f"live, ${self.gpu_usd_per_h:.3f}/h GPU"
        )
        out = (
            f"i:{self.instance_id} m:{self.machine_id} {clean(self.gpu_name, 60)}: "
            f"{'VERIFIED' if self.verified else 'never verified'}, {state}, "
            f"storage ${self.storage_usd_per_day:.3f}/day, ${self.total_usd:.4f} so far"
        )
        if self.unpulled:
            out += f"; outputs NOT pulled off: {self.unpulled}"
        return out


def read_holdings(ledger: Any, campaign: str) -> list[Holding]:
    """The named read: what `campaign` holds, from anything that answers `query(sql, limit=)`
    with columns and rows (the ledger file, or a controller's query API)."""
    return [Holding.from_row(r) for r in ledger.query(holdings_sql(campaign)).as_dicts()]
