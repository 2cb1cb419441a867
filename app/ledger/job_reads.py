"""The ledger's questions about a campaign's jobs, as read-only SQL text (a controller's query API
takes text, so each value is quoted here as an SQL literal)."""

from __future__ import annotations


def literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _campaign_is(campaign: str | None) -> str:
    return "true" if campaign is None else f"campaign = {literal(campaign)}"


def job_events(campaign: str | None, job: str | None = None) -> str:
    """Each job start and end that stands (a write-off later voided does not end one), oldest
    first: what a job's state, hosts and spans are folded from (`views.jobs.fold`)."""
    named = "true" if job is None else f"detail->>'job' = {literal(job)}"
    return f"""
SELECT seq, ts, campaign, instance_id, kind, ok, detail->>'job' AS job,
       detail->>'requeued' AS requeued, detail->>'exit_code' AS exit_code,
       detail->>'attempt' AS attempt, detail->>'log_tail' AS log_tail
FROM standing_events
WHERE kind IN ('job_started', 'job_finished') AND detail->>'job' IS NOT NULL
  AND {_campaign_is(campaign)} AND {named}
ORDER BY seq"""


def campaign_jobs(campaign: str | None) -> str:
    """The jobs each campaign was started with (its latest start's list), started or not."""
    return f"""
SELECT campaign, arg_max(detail->>'jobs', seq) AS jobs
FROM events
WHERE kind = 'campaign_start' AND detail->>'jobs' IS NOT NULL AND {_campaign_is(campaign)}
GROUP BY campaign"""


def _ids(instance_ids: set[int]) -> str:
    return ", ".join(str(int(i)) for i in sorted(instance_ids)) or "NULL"


def billing_spans(instance_ids: set[int]) -> str:
    """The billing spans of these instances (the `billing_spans` view: the receipt's rules)."""
    return f"""
SELECT instance_id, ts, span_s, gpu_on, storage_on, gpu_dph, storage_dph
FROM billing_spans WHERE instance_id IN ({_ids(instance_ids)})
ORDER BY instance_id, ts"""


def hosts(instance_ids: set[int]) -> str:
    """The GPU and machine of each instance, and whether it still exists."""
    return f"""
SELECT instance_id, gpu_name, machine_id, destroyed_at FROM instances
WHERE instance_id IN ({_ids(instance_ids)})"""


def pulled_log(campaign: str | None, job: str) -> str:
    """Where the job's log was last pulled to, once it ended (a `note` of class job_log)."""
    return f"""
SELECT arg_max(detail->>'path', seq) AS path FROM events
WHERE kind = 'note' AND detail->>'class' = 'job_log' AND detail->>'job' = {literal(job)}
  AND {_campaign_is(campaign)}"""


def ssh_route(instance_id: int) -> str:
    """An instance's campaign, whether it still exists or is stopped, and the last SSH route that
    worked (`rentwatch ssh`, `rentwatch logs` of a running job)."""
    i = int(instance_id)
    return f"""
SELECT i.instance_id, i.campaign, i.destroyed_at,
  (SELECT arg_max(kind, seq) FROM events WHERE instance_id = {i} AND phase = 'outcome' AND ok
     AND kind IN ('stop', 'start', 'destroy')) AS last_change,
  r.route_kind, r.route_where
FROM instances i LEFT JOIN (
  SELECT instance_id, arg_max(detail->>'kind', seq) AS route_kind,
         arg_max(detail->>'where', seq) AS route_where
  FROM events WHERE kind = 'ssh_route' AND instance_id = {i} GROUP BY instance_id
) r USING (instance_id)
WHERE i.instance_id = {i}
"""
