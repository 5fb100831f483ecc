-- The operator dashboard's read-only views (scheduler.dashboard). Pages that may show a
-- finished job read jobs_all (jobs and job_history, jobs migration 0021); those of live work and
-- dead letters read jobs. The dashboard is the
-- composition root's operator view over every component, so these queries read the queue's
-- tables too (tests/unit/test_layering.py lists them as known exceptions); every write goes
-- through the owning package's API (jobs.requeue, jobs.cancel, jobs.outbox.retry_dead,
-- scheduler.pause/resume). Counts are bounded (LIMIT 10001: "10,000+"), pages are keyset pages,
-- and every filter is a parameter: (%(x)s::type IS NULL OR col = %(x)s).

-- fragment: dashboard_job_row
-- What a row of the jobs page shows (scheduler/dashboard/views.py, _JOB_COLUMNS).
id, organization_id, queue, job_type, status, priority, run_at, attempts, max_attempts,
last_error_code, left(last_error_summary, 200), completed_at, created_at, idempotency_key

-- fragment: dashboard_job_filter
-- The jobs page's filters, each optional (conditions to AND after a WHERE).
AND (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::text[]))
AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s)
{{dashboard_job_other_filters}}

-- fragment: dashboard_job_other_filters
-- The filters but the status and the error code (which a query may read through their own
-- index).
AND (%(queue)s::text IS NULL OR queue = %(queue)s)
AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s)
AND (%(idempotency_key)s::text IS NULL OR idempotency_key = %(idempotency_key)s)
AND (%(organization_id)s::uuid IS NULL OR organization_id = %(organization_id)s)
AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s)

-- name: dashboard_session_setup
-- Plan each statement for its parameters (the optional filters collapse to the ones given, so a
-- partial index can answer), and bound every statement of the dashboard's connections.
SELECT set_config('plan_cache_mode', 'force_custom_plan', false),
       set_config('statement_timeout', %(timeout)s, false),
       -- The last hour's attempts and an index-first page are sorted in memory, not on disk
       -- (a few connections: the pool's size bounds what this costs).
       set_config('work_mem', '32MB', false),
       -- No JIT compilation: a bounded statement over a big table can be estimated above
       -- jit_above_cost, and compiling it takes longer than running it (as for the workers).
       set_config('jit', 'off', false);

-- name: dashboard_local_timeout
-- A tighter bound for one statement in the current transaction (the bounded counts).
SELECT set_config('statement_timeout', %(timeout)s, true);

-- name: dashboard_job_page
-- One keyset page of jobs, newest id first: ids below %(before)s.
SELECT {{dashboard_job_row}}
FROM jobs_all
WHERE (%(before)s::bigint IS NULL OR id < %(before)s)
  {{dashboard_job_filter}}
ORDER BY id DESC
LIMIT %(limit)s;

-- name: dashboard_job_page_window
-- The same page when no index serves the filter (an organization over every status, a creation
-- time range, a rare combination): the scan is bounded to the ids in [%(floor)s, %(before)s), so
-- a filter that matches nothing costs one window, not the whole table. Fewer than a page of
-- matches in the window: the next page goes on below %(floor)s.
SELECT {{dashboard_job_row}}
FROM jobs_all
WHERE id >= %(floor)s
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
  {{dashboard_job_filter}}
ORDER BY id DESC
LIMIT %(limit)s;

-- name: dashboard_job_dead_floor
-- How far a page of dead letters with other filters reads: the %(skip)s+1-th newest dead job
-- below the cursor, and the next one if any is left below it (none: fewer are left, the page
-- reads them all). Index-only on jobs_dead_recent_idx; the page then reads that range of it.
SELECT id FROM jobs
WHERE status = 'dead' AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
OFFSET %(skip)s
LIMIT 2;

-- name: dashboard_job_error_code_floor
-- The same for an error code with other filters, on jobs_error_code_idx (code, id).
SELECT id FROM jobs_all
WHERE last_error_code = %(error_code)s AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
OFFSET %(skip)s
LIMIT 2;

-- name: dashboard_job_id_bounds
-- The lowest and highest job ids (two probes of the primary key): where a bounded scan starts
-- and whether anything is left below it.
SELECT min(id), max(id) FROM jobs_all;

-- name: dashboard_job_page_indexed
-- The same page when every status asked for has a partial index (pending, retrying, leased,
-- dead): ordering by an expression keeps the planner from walking the primary key backwards
-- through millions of finished rows to find a few matches (or none); it reads the status's
-- index and sorts what matched.
SELECT {{dashboard_job_row}}
FROM jobs
WHERE (%(before)s::bigint IS NULL OR id < %(before)s)
  {{dashboard_job_filter}}
ORDER BY id + 0 DESC
LIMIT %(limit)s;

-- name: dashboard_job_status_rows
-- How many rows the partial indexes of a status filter hold (for the queue, if given), up to
-- %(cap)s per index, index-only: whether reading them all and sorting by id is cheap. An index
-- not asked for (%(ready)s, %(leased)s, %(dead)s false) is not read.
SELECT (SELECT count(*) FROM (SELECT 1 FROM jobs
            WHERE %(ready)s AND status IN ('pending', 'retrying')
              AND (%(queue)s::text IS NULL OR queue = %(queue)s) LIMIT %(cap)s) AS r)
     + (SELECT count(*) FROM (SELECT 1 FROM jobs
            WHERE %(leased)s AND status = 'leased'
              AND (%(queue)s::text IS NULL OR queue = %(queue)s) LIMIT %(cap)s) AS l)
     + (SELECT count(*) FROM (SELECT 1 FROM jobs
            WHERE %(dead)s AND status = 'dead'
              AND (%(queue)s::text IS NULL OR queue = %(queue)s) LIMIT %(cap)s) AS d);

-- name: dashboard_job_count
-- How many jobs match, counted up to 10,001 (shown as "10,000+").
SELECT count(*) FROM (
    SELECT 1
    FROM jobs_all
    WHERE true
      {{dashboard_job_filter}}
    LIMIT 10001
) AS bounded;

-- name: dashboard_job_count_error_code
-- The same count when an error code is given: through the code's index (jobs_error_code_idx,
-- whose rows all carry the code), each row's status checked in the heap. The status test is
-- written so that no status's partial index can answer it (status || ''): left plain, the
-- planner reads the dead letters' index in id order and checks the code of every dead job
-- (it expects their heap order to follow the ids, and reads 26,000 pages for 50,000 rows: 540 ms
-- at 10M jobs, against 50 ms through the code's index).
SELECT count(*) FROM (
    SELECT 1
    FROM jobs_all
    WHERE last_error_code = %(error_code)s
      AND (%(statuses)s::text[] IS NULL OR (status || '') = ANY(%(statuses)s::text[]))
      {{dashboard_job_other_filters}}
    LIMIT 10001
) AS bounded;

-- name: dashboard_dead_ids
-- The dead jobs a filter selects, up to %(limit)s (the confirmation counts them; the action
-- then touches exactly these ids), oldest first. With an error code the caller sends
-- dashboard_dead_ids_by_code instead. With no filter, the dead letters' own index in id order.
-- With a queue or a job type, the caller turns plain index scans off for this statement
-- (dashboard_index_scans, scheduler/dashboard/views.py, dead_ids), so the planner takes a
-- bitmap scan of jobs_dead_idx (queue, job_type, completed_at) and reads only the matching
-- rows' pages. Left to itself it read jobs_dead_recent_idx in id order and checked the filters
-- in the heap: the ids' correlation with the heap makes that look cheap, but dead letters are a
-- few a page over the whole table, so at 10M jobs it read every dead letter's page (104,000
-- buffers, 380-440 ms for a queue or a job type; 0.2 to 23 ms as a bitmap scan).
SELECT id
FROM jobs
WHERE status = 'dead'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s)
ORDER BY id
LIMIT %(limit)s;

-- name: dashboard_dead_ids_by_code
-- An error code given: its index (jobs_error_code_idx: last_error_code, id) in id order, the
-- status and the other filters checked per row; what it reads is bounded by the rows that carry
-- the code.
SELECT id
FROM jobs
WHERE last_error_code = %(error_code)s::text
  AND status = 'dead'
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s)
ORDER BY last_error_code, id
LIMIT %(limit)s;

-- name: dashboard_index_scans
-- Plain index scans on or off for the rest of the current transaction (set back to what
-- current_setting read right after the statement that needed it).
SELECT current_setting('enable_indexscan'), set_config('enable_indexscan', %(value)s, true);

-- name: dashboard_queue_stats
-- The per-queue figures of jobs.queue_stats, bounded: each count stops at 10,001 (shown as
-- "10,000+") and is read from the partial index of its status (index-only where the index holds
-- the columns); the queues are found by skipping through the ready and dead indexes. Retrying is
-- counted in its own partial index (jobs_retrying_idx, migration 0011), index-only.
WITH RECURSIVE ready_queues AS (
    (SELECT queue FROM jobs WHERE status IN ('pending', 'retrying') ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobs AS j
            WHERE j.status IN ('pending', 'retrying') AND j.queue > r.queue
            ORDER BY j.queue LIMIT 1)
    FROM ready_queues AS r WHERE r.queue IS NOT NULL
), dead_queues AS (
    (SELECT queue FROM jobs WHERE status = 'dead' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobs AS j
            WHERE j.status = 'dead' AND j.queue > d.queue ORDER BY j.queue LIMIT 1)
    FROM dead_queues AS d WHERE d.queue IS NOT NULL
), queues AS (
    SELECT queue FROM ready_queues WHERE queue IS NOT NULL
    UNION
    SELECT queue FROM dead_queues WHERE queue IS NOT NULL
    UNION
    SELECT queue FROM leased
), leased AS (
    -- Leased rows are the jobs running right now: as many as the workers' threads.
    SELECT queue, count(*) AS n FROM jobs WHERE status = 'leased' GROUP BY queue
)
SELECT q.queue,
       (SELECT count(*) FROM (SELECT 1 FROM jobs
            WHERE queue = q.queue AND status IN ('pending', 'retrying')
              AND run_at <= coalesce(%(now)s::timestamptz, now()) LIMIT 10001) AS c) AS ready,
       coalesce(extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - (
            -- The oldest ready run_at is the first of some priority's run (the ready index is
            -- ordered by queue, priority, run_at): skip from priority to priority instead of
            -- reading every ready row of the queue.
            -- (the claim's loose scan of the priorities: jobs/sql/job.sql)
            WITH RECURSIVE {{jobs.job_ready_levels queue=q.queue scope=}}
            SELECT min((SELECT j.run_at FROM jobs AS j
                        WHERE j.queue = q.queue AND j.status IN ('pending', 'retrying')
                          AND j.priority = p.priority
                          AND j.run_at <= coalesce(%(now)s::timestamptz, now())
                        ORDER BY j.priority DESC, j.run_at LIMIT 1))
            FROM levels AS p WHERE p.priority IS NOT NULL)), 0)::float8
           AS oldest_ready_age,
       coalesce((SELECT n FROM leased WHERE leased.queue = q.queue), 0) AS leased,
       (SELECT count(*) FROM (SELECT 1 FROM jobs
            WHERE queue = q.queue AND status = 'retrying' LIMIT 10001) AS c) AS retrying,
       (SELECT count(*) FROM (SELECT 1 FROM jobs
            WHERE queue = q.queue AND status = 'dead' LIMIT 10001) AS c) AS dead,
       (SELECT count(*) FROM (SELECT 1 FROM jobs
            WHERE queue = q.queue AND status IN ('pending', 'retrying')
              AND run_at > coalesce(%(now)s::timestamptz, now()) LIMIT 10001) AS c) AS scheduled
FROM queues AS q
ORDER BY q.queue;

-- name: dashboard_attempt_minutes
-- The chart's 60 minutes (UTC, the current one last) and what the rollup of attempts holds for
-- each (job_attempt_minutes, written by the built-in maintenance: jobs migration 0012):
-- completions and failures, or rolled = false where it has no row for a minute that is over
-- (the open minutes always; every minute when the maintenance is not running). 60 probes of
-- its primary key.
SELECT m.minute, r.minute IS NOT NULL AS rolled,
       coalesce((r.outcomes ->> 'succeeded')::bigint, 0) AS succeeded,
       coalesce((SELECT sum(o.value::bigint) FROM jsonb_each_text(r.outcomes) AS o
                 WHERE o.key IN ('retry', 'rate_limited', 'dead', 'lease_expired',
                                 'interrupted', 'fenced')), 0)::bigint AS failed
FROM generate_series(
    date_trunc('minute', coalesce(%(now)s::timestamptz, now()), 'UTC') - interval '59 minutes',
    date_trunc('minute', coalesce(%(now)s::timestamptz, now()), 'UTC'),
    interval '1 minute') AS m(minute)
LEFT JOIN job_attempt_minutes AS r
  ON r.minute = m.minute
 AND r.minute + interval '1 minute' <= coalesce(%(now)s::timestamptz, now())
ORDER BY m.minute;

-- name: dashboard_attempt_minutes_live
-- Minutes the rollup lacks, counted from the attempts themselves: those finished in
-- [%(start)s, %(stop)s) and by now, per minute (the BRIN index on finished_at reads only
-- these minutes' blocks). The caller bounds it (a few minutes per statement, under a timeout).
SELECT date_trunc('minute', finished_at, 'UTC') AS minute,
       count(*) FILTER (WHERE outcome = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE outcome IN ('retry', 'rate_limited', 'dead', 'lease_expired',
                                          'interrupted', 'fenced')) AS failed
FROM job_attempts
WHERE finished_at >= %(start)s::timestamptz
  AND finished_at < %(stop)s::timestamptz
  AND finished_at <= coalesce(%(now)s::timestamptz, now())
GROUP BY 1
ORDER BY 1;

-- name: dashboard_workers
-- Workers holding leases (the partial index on leased rows): how many, the oldest claim, the
-- heartbeat ages (a lease's last sign of life is its last heartbeat, or its claim if none came
-- since: greatest() skips a NULL and outranks a heartbeat left by an earlier lease), and the
-- lease that ends first (heartbeats push it forward; one close to now means stalled heartbeats).
SELECT locked_by, count(*) AS leases,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - min(locked_at))::float8
           AS oldest_claim_age,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now())
                          - max(greatest(heartbeat_at, locked_at)))::float8 AS heartbeat_age,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now())
                          - min(greatest(heartbeat_at, locked_at)))::float8
           AS stalest_heartbeat_age,
       extract(epoch FROM min(locked_until) - coalesce(%(now)s::timestamptz, now()))::float8
           AS first_lease_ends_in
FROM jobs
WHERE status = 'leased'
GROUP BY locked_by
ORDER BY locked_by
LIMIT 200;

-- name: dashboard_lateness
-- Lateness of the latest first attempts that finished in the window, per queue, in buckets:
-- "start" is started_at - run_at (the queue's own delay), "nominal" is started_at - the
-- schedule's nominal occurrence (jitter and queue delay together; only jobs a schedule enqueued
-- carry it). Bucket i counts values below bounds[i] (past the last: above). Bounded twice,
-- whatever the window: the attempts are read newest first through the index of ids (an
-- attempt's id is drawn in the transaction that sets its finished_at, so the ids follow the
-- finishes to within a transaction's length), at most %(scan)s of them, and at most
-- %(sample)s first attempts among them are counted, one probe of the jobs' primary key each.
-- Reading the window through the BRIN index instead read all of it (4.6 million attempts for
-- 7 days at 10M jobs) and sorted it. The last two columns: how many were counted, and the
-- earliest finish among them.
WITH recent AS MATERIALIZED (
    SELECT job_id, queue, started_at, finished_at
    FROM (SELECT job_id, queue, started_at, finished_at, attempt
          FROM job_attempts
          ORDER BY id DESC
          LIMIT %(scan)s) AS newest
    WHERE finished_at > coalesce(%(now)s::timestamptz, now()) - %(window)s::interval
      AND finished_at <= coalesce(%(now)s::timestamptz, now())
      AND attempt = 1 AND started_at IS NOT NULL
      AND (%(queue)s::text IS NULL OR queue = %(queue)s)
    LIMIT %(sample)s
)
SELECT r.queue, m.kind,
       width_bucket(m.seconds, %(bounds)s::float8[]) AS bucket,
       count(*) AS n,
       (SELECT count(*) FROM recent) AS counted,
       (SELECT min(finished_at) FROM recent) AS since
FROM recent AS r
JOIN jobs_all AS j ON j.id = r.job_id
CROSS JOIN LATERAL (
    VALUES ('start', extract(epoch FROM r.started_at - j.run_at)::float8),
           ('nominal', extract(epoch FROM r.started_at
                           - (j.payload -> 'tockwork_schedule' ->> 'at')::timestamptz)::float8)
) AS m(kind, seconds)
WHERE m.seconds IS NOT NULL
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;

-- name: dashboard_schedule_jitter
-- A schedule's recent occurrences (through its idempotency keys): run_at against the nominal
-- occurrence instant, newest first.
SELECT id, payload -> 'tockwork_schedule' ->> 'occurrence' AS occurrence,
       (payload -> 'tockwork_schedule' ->> 'at')::timestamptz AS nominal_at, run_at,
       extract(epoch FROM run_at - (payload -> 'tockwork_schedule' ->> 'at')::timestamptz)::float8
           AS jitter_s,
       status
FROM jobs_all
WHERE organization_id IS NOT DISTINCT FROM %(organization_id)s::uuid
  AND job_type = %(job_type)s
  AND idempotency_key >= %(prefix)s AND idempotency_key < %(prefix_end)s
ORDER BY run_at DESC
LIMIT 50;

-- name: dashboard_schedule_search
-- One keyset page of schedules by id: key prefix, subject, zone, job type.
SELECT id, organization_id, key, subject, job_type, queue, zone, rule, paused, next_run_at,
       last_occurrence_at, enqueued_count, source, pause_note, paused_until, finished_at
FROM schedules
WHERE (%(after)s::bigint IS NULL OR id > %(after)s)
  AND (%(key)s::text IS NULL OR starts_with(key, %(key)s))
  AND (%(subject)s::text IS NULL OR subject = %(subject)s)
  AND (%(zone)s::text IS NULL OR zone = %(zone)s)
  AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s)
ORDER BY id
LIMIT %(limit)s;

-- name: dashboard_maintenance_runs
-- The built-in maintenance definitions (keys 'tockwork.*'): when each last ran and runs next.
SELECT key, paused, last_occurrence_at, next_run_at
FROM schedules
WHERE key >= 'tockwork.' AND key < 'tockwork/'
ORDER BY key
LIMIT 50;

-- name: dashboard_outbox_dead_page
-- Dead outbox events, newest first, keyset on (dead_at, id).
SELECT id, aggregate_type, aggregate_id, event_type, occurred_at, attempts,
       left(last_error, 300), dead_at
FROM outbox_events
WHERE dead_at IS NOT NULL
  AND (%(before)s::timestamptz IS NULL OR dead_at < %(before)s)
ORDER BY dead_at DESC
LIMIT %(limit)s;
