"""Ledger schema: tables, their migrations, and the SQL views any DuckDB client can read. The views
bill as `rentwatch.core.billing.charges` does (a property test keeps them equal); an instance
still alive is billed up to its campaign's clock."""

from __future__ import annotations

SCHEMA_VERSION = 2

# Version 1, kept so a test can write an old ledger and prove it migrates.
V1_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS events (
    seq BIGINT PRIMARY KEY, ts DOUBLE NOT NULL, campaign VARCHAR, instance_id BIGINT,
    machine_id BIGINT, host_id BIGINT, offer_id BIGINT, gpu_name VARCHAR, gpu_dph DOUBLE,
    storage_dph DOUBLE, actor VARCHAR NOT NULL, kind VARCHAR NOT NULL, phase VARCHAR NOT NULL,
    ok BOOLEAN, reason VARCHAR, detail JSON);
CREATE TABLE IF NOT EXISTS samples (
    instance_id BIGINT NOT NULL, ts DOUBLE NOT NULL, util DOUBLE, sm_clock DOUBLE,
    max_sm_clock DOUBLE, reasons_bits BIGINT, temp DOUBLE, power_w DOUBLE, mem_used_mb DOUBLE);
"""

# v1 -> v2: the wall-clock time of each event and the intent an outcome answers.
MIGRATIONS = {
    2: """
ALTER TABLE events ADD COLUMN IF NOT EXISTS wall DOUBLE;
ALTER TABLE events ADD COLUMN IF NOT EXISTS intent_seq BIGINT;
""",
}

VIEWS = r"""
-- the moment the ledger computes to: its latest event, or the last poll's moment if later
-- (`Ledger.tick`: a rental still alive bills up to where the engine last looked)
CREATE OR REPLACE VIEW ledger_clock AS
SELECT greatest(coalesce(max(ts), 0), coalesce(
  (SELECT TRY_CAST(value AS DOUBLE) FROM meta WHERE key = 'clock'), 0)) AS now FROM events;

-- each campaign's clock: the same, over the campaigns that rented on its market (its
-- campaign_start names it; '' where none does). One ledger may hold several markets' clocks:
-- the demo's simulated markets each start at the wall clock and run 30x, so a live rental of
-- today's demo was billed up to where yesterday's demo had run to (hours ahead)
CREATE OR REPLACE VIEW campaign_clocks AS
WITH cm AS (
  SELECT coalesce(campaign, '') AS campaign, max(ts) AS last_ts,
         coalesce(arg_max(detail->>'market', seq) FILTER (
           WHERE kind = 'campaign_start' AND detail->>'market' IS NOT NULL), '') AS market
  FROM events GROUP BY 1
), mk AS (
  SELECT market, max(last_ts) AS ts FROM cm GROUP BY market
), ticks AS (
  SELECT substr(key, 7) AS market, TRY_CAST(value AS DOUBLE) AS ts FROM meta WHERE key LIKE 'clock@%'
  UNION ALL SELECT '', TRY_CAST(value AS DOUBLE) FROM meta WHERE key = 'clock'
), tk AS (
  SELECT market, max(ts) AS ts FROM ticks GROUP BY market
)
SELECT cm.campaign, cm.market, greatest(coalesce(mk.ts, 0), coalesce(tk.ts, 0)) AS now
FROM cm JOIN mk USING (market) LEFT JOIN tk USING (market);

-- the events that stand: a write-off (`lost`) is void when the instance was listed again after
-- it (`returned`): it never stopped existing, nor billing
CREATE OR REPLACE VIEW standing_events AS
SELECT * FROM events
WHERE kind <> 'lost' OR seq NOT IN (
  SELECT l.seq FROM events l
  JOIN (SELECT instance_id, max(seq) AS back FROM events WHERE kind = 'returned' GROUP BY 1) r
    ON r.instance_id = l.instance_id
  WHERE l.kind = 'lost' AND r.back > l.seq);

-- a job's exit 0 that does not stand: a later row on the same instance requeued that job before
-- it started again anywhere (its output went with the host before it came off: `JobWork.requeue`
-- while the job was finishing), so only the rerun that delivers counts as the job finished
CREATE OR REPLACE VIEW voided_exits AS
SELECT f.seq, f.campaign, f.instance_id, f.detail->>'job' AS job FROM events f
WHERE f.kind = 'job_finished' AND f.ok AND EXISTS (
  SELECT 1 FROM events q
  WHERE q.kind = 'job_finished' AND q.detail->>'requeued' IS NOT NULL AND q.seq > f.seq
    AND q.instance_id = f.instance_id AND q.detail->>'job' = f.detail->>'job'
    AND q.campaign IS NOT DISTINCT FROM f.campaign
    AND NOT EXISTS (
      SELECT 1 FROM events s
      WHERE s.kind = 'job_started' AND s.seq > f.seq AND s.seq < q.seq
        AND s.detail->>'job' = f.detail->>'job' AND s.campaign IS NOT DISTINCT FROM f.campaign));

-- the job ends that count as a job finished (with its work): exit 0 and not voided
CREATE OR REPLACE VIEW job_exits AS
SELECT * FROM standing_events
WHERE kind = 'job_finished' AND ok AND seq NOT IN (SELECT seq FROM voided_exits);

-- billing marks: acknowledged lifecycle changes, in order
CREATE OR REPLACE VIEW billing_marks AS
SELECT instance_id, seq, ts, coalesce(campaign, '') AS campaign,
       CASE WHEN kind = 'status' AND detail->>'status' IN ('running', 'frozen') THEN 'running'
            WHEN kind = 'status' AND detail->>'status' IN ('exited', 'unknown') THEN 'halt'
            -- Vast's docs: no rental and no storage charges while offline
            WHEN kind = 'status' AND detail->>'status' = 'offline' THEN 'offline'
            -- the market shows a dark host's stopped instance as stopped: no sign it is back
            WHEN kind = 'status' AND detail->>'status' = 'stopped' THEN 'seen'
            WHEN kind = 'status' THEN 'online'
            WHEN kind = 'lost' THEN 'destroy'
            -- core.billing.EVENT_MARKS: a bid rental's resume (held and running); a rebid's
            -- or an accepted price increase's price (core.billing.price_of: finite and not
            -- negative, else no mark's price)
            WHEN kind = 'resumed' THEN 'resume'
            WHEN kind IN ('rebid', 'price') THEN 'price'
            -- a held instance's row unreadable from `ts` (its last good read) to its
            -- `read_again`: billed online and running, the worst case (core.billing)
            WHEN kind = 'read_again' THEN 'read'
            ELSE kind END AS mark,
       CASE WHEN kind = 'create' THEN gpu_dph
            WHEN kind IN ('rebid', 'price') AND isfinite(TRY_CAST(detail->>'price' AS DOUBLE))
                 AND TRY_CAST(detail->>'price' AS DOUBLE) >= 0
              THEN TRY_CAST(detail->>'price' AS DOUBLE) END AS gpu_dph,
       CASE WHEN kind = 'create' THEN storage_dph END AS storage_dph,
       CASE WHEN kind = 'create' THEN coalesce(detail->>'gpu_billing', 'created') END AS billing
FROM standing_events
WHERE instance_id IS NOT NULL AND coalesce(ok, true) AND phase <> 'intent'
  AND (kind IN ('create', 'stop', 'start', 'destroy', 'lost', 'resumed', 'rebid', 'price',
                 'unread', 'read_again')
       OR kind = 'status');

CREATE OR REPLACE VIEW billing_spans AS
WITH m AS (
  SELECT *,
    last_value(gpu_dph IGNORE NULLS) OVER w AS p_gpu,
    last_value(storage_dph IGNORE NULLS) OVER w AS p_storage,
    last_value(billing IGNORE NULLS) OVER w AS mode,
    max(CASE WHEN mark = 'create' THEN 1 ELSE 0 END) OVER w AS created,
    max(CASE WHEN mark = 'destroy' THEN 1 ELSE 0 END) OVER w AS destroyed,
    last_value(CASE WHEN mark IN ('create', 'start', 'resume') THEN 1 WHEN mark = 'stop' THEN 0 END IGNORE NULLS) OVER w AS held,
    last_value(CASE WHEN mark IN ('running', 'resume') THEN 1 WHEN mark IN ('halt', 'stop', 'create', 'offline') THEN 0 END IGNORE NULLS) OVER w AS running,
    last_value(CASE WHEN mark = 'offline' THEN 0 WHEN mark IN ('online', 'running', 'halt', 'create', 'start', 'resume') THEN 1 END IGNORE NULLS) OVER w AS online,
    last_value(CASE WHEN mark = 'unread' THEN 1 WHEN mark = 'read' THEN 0 END IGNORE NULLS) OVER w AS unread,
    lead(ts) OVER (PARTITION BY instance_id ORDER BY ts, seq) AS next_at
  FROM billing_marks
  WINDOW w AS (PARTITION BY instance_id ORDER BY ts, seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT m.instance_id, m.ts, m.campaign,
       greatest(coalesce(m.next_at, k.now, (SELECT now FROM ledger_clock)) - m.ts, 0) AS span_s,
       created = 1 AND destroyed = 0 AND (coalesce(online, 1) = 1 OR coalesce(unread, 0) = 1) AS storage_on,
       created = 1 AND destroyed = 0 AND (coalesce(online, 1) = 1 OR coalesce(unread, 0) = 1)
         AND coalesce(held, 0) = 1
         AND (mode = 'created' OR coalesce(running, 0) = 1 OR coalesce(unread, 0) = 1) AS gpu_on,
       coalesce(p_gpu, 0) AS gpu_dph, coalesce(p_storage, 0) AS storage_dph
FROM m LEFT JOIN campaign_clocks k ON k.campaign = coalesce(m.campaign, '');

CREATE OR REPLACE VIEW instance_charges AS
SELECT instance_id,
       sum(CASE WHEN gpu_on THEN span_s * gpu_dph / 3600 ELSE 0 END) AS gpu_usd,
       sum(CASE WHEN storage_on THEN span_s * storage_dph / 3600 ELSE 0 END) AS storage_usd
FROM billing_spans GROUP BY instance_id;

-- the same, split by the campaign whose event opened each span (a rental stopped by one campaign
-- and started again by the next is billed to each for its own time)
CREATE OR REPLACE VIEW tenure_charges AS
SELECT campaign, instance_id,
       sum(CASE WHEN gpu_on THEN span_s * gpu_dph / 3600 ELSE 0 END) AS gpu_usd,
       sum(CASE WHEN storage_on THEN span_s * storage_dph / 3600 ELSE 0 END) AS storage_usd,
       sum(CASE WHEN gpu_on THEN span_s / 3600 ELSE 0 END) AS gpu_billed_h
FROM billing_spans GROUP BY campaign, instance_id;

-- the events that end a verified rental's delivery (`instances`, `tenures`, `resumed_spans`)
CREATE OR REPLACE VIEW delivery_ends AS
SELECT * FROM standing_events
WHERE phase <> 'intent' AND coalesce(ok, true)
  AND (kind IN ('stop', 'destroy', 'lost', 'abandon')
       OR (kind = 'status' AND detail->>'status' IN ('exited', 'offline', 'unknown')));

-- a verified bid rental's runs after a resume by itself: each from its `resumed` event to the
-- next delivery end, or open (NULL); core.figures.delivered_hours adds them (`resumed`)
CREATE OR REPLACE VIEW resumed_spans AS
WITH v AS (
  SELECT instance_id, min(ts) AS verified_at FROM standing_events
  WHERE kind = 'preflight_passed' AND instance_id IS NOT NULL GROUP BY 1
), r AS (
  SELECT ev.instance_id, coalesce(ev.campaign, '') AS campaign, ev.seq, ev.ts
  FROM standing_events ev JOIN v USING (instance_id)
  WHERE ev.kind = 'resumed' AND ev.phase <> 'intent' AND coalesce(ev.ok, true)
    AND ev.ts >= v.verified_at
)
SELECT r.instance_id, r.campaign, r.ts AS began,
       (SELECT min(h.ts) FROM delivery_ends h
        WHERE h.instance_id = r.instance_id AND h.ts >= r.ts AND h.seq > r.seq) AS ended
FROM r;

CREATE OR REPLACE VIEW instances AS
WITH c AS (
  SELECT instance_id, any_value(campaign) AS campaign, any_value(machine_id) AS machine_id,
         any_value(host_id) AS host_id, any_value(offer_id) AS offer_id, any_value(gpu_name) AS gpu_name,
         any_value(gpu_dph) AS gpu_dph, any_value(storage_dph) AS storage_dph, min(ts) AS created_at
  FROM events WHERE kind = 'create' AND phase <> 'intent' AND ok AND instance_id IS NOT NULL
  GROUP BY instance_id
), e AS (
  SELECT instance_id,
    min(ts) FILTER (WHERE kind = 'status' AND detail->>'status' = 'running') AS running_at,
    min(ts) FILTER (WHERE kind = 'status') AS listed_at,
    min(ts) FILTER (WHERE kind = 'preflight_passed') AS verified_at,
    min(ts) FILTER (WHERE kind = 'abandon') AS abandoned_at,
    arg_min(detail->>'class', seq) FILTER (WHERE kind = 'abandon') AS failure_class,
    arg_min(reason, seq) FILTER (WHERE kind = 'abandon') AS failure_reason,
    max(ts) FILTER (WHERE kind = 'stop' AND phase <> 'intent' AND ok) AS stopped_at,
    min(ts) FILTER (WHERE kind IN ('destroy', 'lost') AND phase <> 'intent' AND ok) AS destroyed_at,
    count(*) FILTER (WHERE kind = 'job_finished' AND ok AND seq NOT IN (SELECT seq FROM voided_exits)) AS jobs_finished,
    count(*) FILTER (WHERE kind = 'returned') AS returns,
    bool_or(kind = 'lost') AS written_off,
    count(*) FILTER (WHERE kind = 'unread') AS unread_spells,
    max(ts) AS last_seen
  FROM standing_events WHERE instance_id IS NOT NULL GROUP BY instance_id
), d AS (
  SELECT e.instance_id, min(ev.ts) AS delivered_until
  FROM e JOIN delivery_ends ev ON ev.instance_id = e.instance_id
  WHERE e.verified_at IS NOT NULL AND ev.ts >= e.verified_at
  GROUP BY e.instance_id
)
SELECT c.*, e.running_at, e.verified_at, e.abandoned_at, e.failure_class, e.failure_reason,
       e.stopped_at, e.destroyed_at, e.jobs_finished, e.returns, e.written_off, e.unread_spells,
       CASE WHEN e.jobs_finished > 0 THEN 'finished' WHEN e.verified_at IS NOT NULL THEN 'computed'
            WHEN e.running_at IS NOT NULL THEN 'booted' WHEN e.listed_at IS NOT NULL THEN 'booting'
            ELSE 'requested' END AS phase_reached,
       -- as core.lifecycle.is_dud: never delivered, through its host's fault (not cancelled)
       e.verified_at IS NULL AND (e.abandoned_at IS NOT NULL OR e.destroyed_at IS NOT NULL)
         AND coalesce(e.failure_class, '') <> 'cancelled' AS dud,
       (coalesce(e.destroyed_at, e.abandoned_at, e.last_seen) - c.created_at) / 60 AS lifetime_min,
       CASE WHEN e.verified_at IS NOT NULL THEN
         (coalesce(d.delivered_until, k.now, (SELECT now FROM ledger_clock)) - e.verified_at
          + coalesce((SELECT sum(coalesce(rs.ended, k.now, (SELECT now FROM ledger_clock)) - rs.began)
                      FROM resumed_spans rs WHERE rs.instance_id = c.instance_id), 0)) / 3600
         ELSE 0 END AS gpu_hours,
       coalesce(ch.gpu_usd, 0) AS gpu_usd, coalesce(ch.storage_usd, 0) AS storage_usd,
       coalesce(ch.gpu_usd, 0) + coalesce(ch.storage_usd, 0) AS total_usd,
       -- the same moments as a person reads them (TIMESTAMPTZ to the second, in the session's zone)
       date_trunc('second', to_timestamp(c.created_at)) AS created_time,
       date_trunc('second', to_timestamp(e.verified_at)) AS verified_time,
       date_trunc('second', to_timestamp(e.stopped_at)) AS stopped_time,
       date_trunc('second', to_timestamp(e.destroyed_at)) AS destroyed_time
FROM c JOIN e USING (instance_id)
LEFT JOIN d USING (instance_id)
LEFT JOIN instance_charges ch USING (instance_id)
LEFT JOIN campaign_clocks k ON k.campaign = coalesce(c.campaign, '');

CREATE OR REPLACE VIEW hosts AS
WITH ev AS (
  SELECT machine_id,
         count(DISTINCT instance_id) FILTER (WHERE kind = 'throttle') AS throttled,
         count(DISTINCT instance_id) FILTER (WHERE kind = 'status' AND detail->>'status' = 'offline') AS went_offline,
         -- sized jobs finished there: their reference GPU-hours, the speed they got (a share of
         -- the model's), and the work lost when the host left mid-job
         sum(TRY_CAST(detail->>'work_ref_h' AS DOUBLE)) FILTER (WHERE kind = 'job_finished' AND ok AND seq NOT IN (SELECT seq FROM voided_exits))
           AS work_ref_h,
         avg(TRY_CAST(detail->>'speed_share' AS DOUBLE)) FILTER (WHERE kind = 'job_finished') AS speed_share,
         sum(TRY_CAST(detail->>'work_lost_ref_h' AS DOUBLE)) FILTER (WHERE kind = 'job_finished') AS work_lost_ref_h
  FROM events WHERE machine_id IS NOT NULL GROUP BY machine_id
)
SELECT i.machine_id, any_value(i.host_id) AS host_id, count(*) AS creates,
       count(*) FILTER (WHERE running_at IS NOT NULL) AS booted,
       count(*) FILTER (WHERE verified_at IS NOT NULL) AS computed,
       count(*) FILTER (WHERE jobs_finished > 0) AS finished,
       coalesce(any_value(ev.throttled), 0) AS throttled,
       coalesce(any_value(ev.went_offline), 0) AS went_offline,
       count(*) FILTER (WHERE dud) AS duds,
       string_agg(DISTINCT failure_class, ',') AS failure_classes,
       coalesce(sum(total_usd) FILTER (WHERE dud), 0) AS dud_usd,
       sum(total_usd) AS total_usd,
       coalesce(any_value(ev.work_ref_h), 0) AS work_ref_h,
       any_value(ev.speed_share) AS speed_share,
       coalesce(any_value(ev.work_lost_ref_h), 0) AS work_lost_ref_h,
       -- dollars per delivered reference GPU-hour: all it billed over the work it finished
       sum(total_usd) / nullif(any_value(ev.work_ref_h), 0) AS usd_per_ref_hour
FROM instances i LEFT JOIN ev USING (machine_id) GROUP BY i.machine_id;

-- the same record per host (one host may list several machines)
CREATE OR REPLACE VIEW host_record AS
SELECT host_id, count(*) AS machines, sum(creates) AS creates, sum(booted) AS booted,
       sum(computed) AS computed, sum(finished) AS finished, sum(throttled) AS throttled,
       sum(went_offline) AS went_offline, sum(duds) AS duds, sum(dud_usd) AS dud_usd
FROM hosts GROUP BY host_id;

CREATE OR REPLACE VIEW quarantine AS
SELECT machine_id, arg_max(reason, seq) AS reason, max(ts) AS since,
       arg_max(TRY_CAST(detail->>'until' AS DOUBLE), seq) AS until,
       date_trunc('second', to_timestamp(max(ts))) AS since_time,
       date_trunc('second', to_timestamp(arg_max(TRY_CAST(detail->>'until' AS DOUBLE), seq))) AS until_time
FROM events WHERE kind = 'quarantine' AND machine_id IS NOT NULL GROUP BY machine_id;

-- the interruptible tier's record, one row per bid rental (its create names `detail.bid`) over
-- every campaign: the hours it ran on its bid (from the create to its last event, less the
-- spans an outbid paused it: from the outbid to its resume, a start, or its stop or end) and
-- its outbids. core/bidding.outbid_rate reads outbids per running hour per machine and model.
CREATE OR REPLACE VIEW bid_exposure AS
WITH b AS (
  SELECT instance_id, any_value(machine_id) AS machine_id, any_value(gpu_name) AS gpu_name
  FROM events WHERE kind = 'create' AND phase <> 'intent' AND ok AND instance_id IS NOT NULL
    AND detail->>'bid' IS NOT NULL
  GROUP BY instance_id
), m AS (
  SELECT e.instance_id, e.kind, e.ts,
    last_value(CASE WHEN e.kind IN ('create', 'resumed', 'start') THEN 1
                    WHEN e.kind IN ('outbid', 'stop', 'destroy', 'lost') THEN 0 END IGNORE NULLS)
      OVER (PARTITION BY e.instance_id ORDER BY e.ts, e.seq
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS on_bid,
    lead(e.ts) OVER (PARTITION BY e.instance_id ORDER BY e.ts, e.seq) AS next_at
  FROM standing_events e JOIN b USING (instance_id)
  WHERE e.phase <> 'intent' AND coalesce(e.ok, true)
)
SELECT b.instance_id, b.machine_id, b.gpu_name,
       coalesce(sum(CASE WHEN m.on_bid = 1 THEN coalesce(m.next_at, m.ts) - m.ts END), 0) / 3600
         AS run_h,
       count(*) FILTER (WHERE m.kind = 'outbid') AS outbids
FROM b JOIN m USING (instance_id) GROUP BY b.instance_id, b.machine_id, b.gpu_name;

-- the events with their time as a timestamp beside the epoch seconds, for people reading them
CREATE OR REPLACE VIEW timeline AS
SELECT seq, date_trunc('second', to_timestamp(ts)) AS time, ts, campaign, instance_id, machine_id, host_id, kind, phase,
       actor, ok, reason, date_trunc('second', to_timestamp(wall)) AS wall_time
FROM events;

-- one campaign's hold on one instance: the campaign that created it, or a later one that reused it
CREATE OR REPLACE VIEW tenures AS
WITH t AS (
  SELECT coalesce(campaign, '') AS campaign, instance_id,
    bool_or(kind = 'create' AND phase <> 'intent' AND ok) AS created,
    coalesce(min(ts) FILTER (WHERE kind = 'create' AND phase <> 'intent' AND ok), min(ts)) AS began,
    min(ts) FILTER (WHERE kind = 'preflight_passed') AS verified_at,
    min(ts) FILTER (WHERE kind = 'abandon') AS abandoned_at,
    arg_min(detail->>'class', seq) FILTER (WHERE kind = 'abandon') AS failure_class,
    -- given up because the market stopped it before it was proven (outbid, contract end)
    coalesce(bool_or(kind = 'abandon' AND actor = 'rule:market_stop'), false) AS market_stopped,
    min(ts) FILTER (WHERE kind IN ('destroy', 'lost') AND phase <> 'intent' AND ok) AS destroyed_at,
    count(*) FILTER (WHERE kind = 'job_finished' AND ok AND seq NOT IN (SELECT seq FROM voided_exits)) AS jobs_finished,
    max(ts) AS last_seen
  FROM standing_events WHERE instance_id IS NOT NULL GROUP BY ALL
), d AS (
  SELECT t.campaign, t.instance_id, min(ev.ts) AS delivered_until
  FROM t JOIN delivery_ends ev ON ev.instance_id = t.instance_id
  WHERE t.verified_at IS NOT NULL AND ev.ts >= t.verified_at
  GROUP BY ALL
)
SELECT t.*,
       t.verified_at IS NULL AND (t.abandoned_at IS NOT NULL OR t.destroyed_at IS NOT NULL)
         AND coalesce(t.failure_class, '') <> 'cancelled' AS dud,
       (coalesce(t.destroyed_at, t.abandoned_at, t.last_seen) - t.began) / 60 AS lifetime_min,
       CASE WHEN t.verified_at IS NOT NULL THEN
         (coalesce(d.delivered_until, k.now, (SELECT now FROM ledger_clock)) - t.verified_at
          + coalesce((SELECT sum(coalesce(rs.ended, k.now, (SELECT now FROM ledger_clock)) - rs.began)
                      FROM resumed_spans rs
                      WHERE rs.instance_id = t.instance_id AND rs.campaign = t.campaign), 0)) / 3600
         ELSE 0 END AS gpu_hours,
       coalesce(ch.gpu_usd, 0) + coalesce(ch.storage_usd, 0) AS total_usd,
       coalesce(ch.gpu_usd, 0) AS gpu_usd, coalesce(ch.gpu_billed_h, 0) AS gpu_billed_h
FROM t LEFT JOIN d USING (campaign, instance_id)
LEFT JOIN tenure_charges ch USING (campaign, instance_id)
LEFT JOIN campaign_clocks k ON k.campaign = t.campaign
WHERE t.instance_id IN (SELECT instance_id FROM events WHERE kind = 'create' AND phase <> 'intent' AND ok);

CREATE OR REPLACE VIEW receipt_classes AS
SELECT campaign, failure_class, count(*) AS n FROM tenures
WHERE dud GROUP BY campaign, failure_class;

-- per campaign, from its tenures: what it created, what it reused, what it paid for each
CREATE OR REPLACE VIEW receipt AS
SELECT campaign, count(*) FILTER (WHERE created) AS creates,
       count(*) FILTER (WHERE NOT created) AS reused,
       count(*) FILTER (WHERE dud) AS duds,
       count(*) FILTER (WHERE dud) / count(*) AS dud_share,
       coalesce(sum(total_usd) FILTER (WHERE dud), 0) AS dud_usd,
       coalesce(avg(lifetime_min) FILTER (WHERE dud), 0) AS dud_mean_lifetime_min,
       count(*) FILTER (WHERE verified_at IS NULL AND failure_class = 'cancelled' AND market_stopped)
         AS stopped_by_market,
       count(*) FILTER (WHERE verified_at IS NULL AND failure_class = 'cancelled' AND NOT market_stopped)
         AS cancelled,
       count(*) FILTER (WHERE verified_at IS NOT NULL) AS verified,
       sum(gpu_hours) AS gpu_hours,
       sum(jobs_finished) AS jobs_finished,
       sum(total_usd) AS total_usd,
       CASE WHEN sum(gpu_hours) > 0 THEN sum(total_usd) / sum(gpu_hours) END AS usd_per_gpu_hour,
       CASE WHEN sum(gpu_hours) > 0 THEN count(*) FILTER (WHERE created) / sum(gpu_hours) END AS creates_per_gpu_hour
FROM tenures GROUP BY campaign;
"""
