-- Named queries on the schedules table, loaded by scheduler/queries.py (jobs/queries.py's loader).

-- fragment: schedule_columns
-- A schedule's columns in the order scheduler/model.py's schedule_from_row reads them.
id, organization_id, key, subject, job_type, queue, payload, rule, zone, gap_policy,
fold_policy, jitter_seconds, catch_up, catch_up_grace_seconds, catch_up_max, quiet_start,
quiet_end, quiet_action, paused, cursor_at, next_run_at, next_occurrence_key,
last_occurrence_key, last_occurrence_at, last_job_id, enqueued_count, missed_count,
skipped_count, tzdb_version, version, source, created_at, updated_at, overlap,
overlap_skipped_count, pause_note, paused_until, start_at, end_at, max_runs, finished_at,
overlap_job_ids, max_lateness_seconds

-- name: schedule_insert
INSERT INTO schedules (organization_id, key, subject, job_type, queue, payload, rule, zone,
                       gap_policy, fold_policy, jitter_seconds, catch_up,
                       catch_up_grace_seconds, catch_up_max, quiet_start, quiet_end,
                       quiet_action, paused, cursor_at, next_run_at, next_occurrence_key,
                       tzdb_version, source, created_at, updated_at, overlap, start_at,
                       end_at, max_runs, finished_at, max_lateness_seconds)
VALUES (%(organization_id)s::uuid, %(key)s::text, %(subject)s::text, %(job_type)s, %(queue)s,
        %(payload)s::jsonb, %(rule)s::jsonb, %(zone)s, %(gap)s::text, %(fold)s::text,
        %(jitter)s, %(catch_up)s, %(grace)s::int, %(catch_up_max)s, %(quiet_start)s::time,
        %(quiet_end)s::time, %(quiet_action)s::text, %(paused)s, %(cursor_at)s,
        %(next_run_at)s::timestamptz, %(next_key)s::text, %(tzdb)s, %(source)s,
        %(now)s, %(now)s, %(overlap)s, %(start_at)s::timestamptz, %(end_at)s::timestamptz,
        %(max_runs)s::int, %(finished_at)s::timestamptz, %(max_lateness)s::int)
ON CONFLICT (organization_id, key) WHERE key IS NOT NULL DO NOTHING
RETURNING id;

-- name: schedule_update
UPDATE schedules
SET subject = %(subject)s::text, job_type = %(job_type)s, queue = %(queue)s,
    payload = %(payload)s::jsonb, rule = %(rule)s::jsonb, zone = %(zone)s,
    gap_policy = %(gap)s::text, fold_policy = %(fold)s::text, jitter_seconds = %(jitter)s,
    catch_up = %(catch_up)s, catch_up_grace_seconds = %(grace)s::int,
    catch_up_max = %(catch_up_max)s, quiet_start = %(quiet_start)s::time,
    quiet_end = %(quiet_end)s::time, quiet_action = %(quiet_action)s::text,
    paused = %(paused)s, cursor_at = %(cursor_at)s, next_run_at = %(next_run_at)s::timestamptz,
    next_occurrence_key = %(next_key)s::text, tzdb_version = %(tzdb)s,
    skipped_count = skipped_count + %(superseded)s,
    version = version + %(version_step)s, updated_at = %(now)s, overlap = %(overlap)s,
    start_at = %(start_at)s::timestamptz, end_at = %(end_at)s::timestamptz,
    max_runs = %(max_runs)s::int, pause_note = %(pause_note)s::text,
    paused_until = %(paused_until)s::timestamptz, finished_at = %(finished_at)s::timestamptz,
    max_lateness_seconds = %(max_lateness)s::int
WHERE id = %(id)s;

-- name: schedule_due_lock
-- One tick batch: lease due schedules with row locks (SKIP LOCKED, so replicas split the work
-- instead of queueing behind each other), then take each one's transaction-scoped advisory lock
-- (our own class id) without waiting. A row locked here was re-read after any concurrent commit
-- (READ COMMITTED re-checks the due condition on the newest version). A schedule paused until
-- a time is due at its first occurrence after it (the tick resumes it); one with an overlap
-- policy other than allow only when the occurrence is due, not ahead (scheduler/overlap.py).
WITH due AS MATERIALIZED (
    SELECT {{schedule_columns}}
    FROM schedules
    WHERE (NOT paused OR paused_until IS NOT NULL) AND next_run_at <= %(horizon)s
      AND (overlap = 'allow' OR next_run_at <= %(now)s)
    ORDER BY next_run_at
    LIMIT %(limit)s
    FOR NO KEY UPDATE SKIP LOCKED
)
SELECT due.*, pg_try_advisory_xact_lock(%(lock_class)s, (due.id %% 2147483647)::int) AS locked
FROM due;

-- name: schedule_advance
UPDATE schedules AS s
SET cursor_at = coalesce(u.cursor_at, s.cursor_at),
    next_run_at = u.next_run_at,
    next_occurrence_key = u.next_key,
    last_occurrence_key = coalesce(u.last_key, s.last_occurrence_key),
    last_occurrence_at = coalesce(u.last_at, s.last_occurrence_at),
    last_job_id = coalesce(u.last_job_id, s.last_job_id),
    enqueued_count = s.enqueued_count + u.enqueued,
    missed_count = s.missed_count + u.missed,
    skipped_count = s.skipped_count + u.skipped,
    overlap_skipped_count = s.overlap_skipped_count + u.overlapped,
    tzdb_version = u.tzdb,
    -- A pause with an end is over once the tick plans past it (the lock query's rule).
    paused = s.paused AND s.paused_until IS NULL,
    pause_note = CASE WHEN s.paused_until IS NULL THEN s.pause_note END,
    paused_until = NULL,
    finished_at = CASE WHEN u.next_run_at IS NULL THEN coalesce(s.finished_at, %(now)s) END,
    updated_at = %(now)s
FROM unnest(%(ids)b::bigint[], %(cursor_ats)b::timestamptz[], %(next_run_ats)b::timestamptz[],
            %(next_keys)b::text[], %(last_keys)b::text[], %(last_ats)b::timestamptz[],
            %(last_job_ids)b::bigint[], %(enqueued)b::int[], %(missed)b::int[],
            %(skipped)b::int[], %(overlapped)b::int[], %(tzdbs)b::text[])
     AS u(id, cursor_at, next_run_at, next_key, last_key, last_at, last_job_id, enqueued,
          missed, skipped, overlapped, tzdb)
WHERE s.id = u.id;

-- name: schedule_stale_tzdb
SELECT {{schedule_columns}}
FROM schedules
WHERE tzdb_version <> %(tzdb)s
ORDER BY id
LIMIT %(limit)s
FOR NO KEY UPDATE SKIP LOCKED;

-- name: schedule_set_next
UPDATE schedules AS s
SET next_run_at = u.next_run_at, next_occurrence_key = u.next_key, tzdb_version = %(tzdb)s,
    updated_at = %(now)s
FROM unnest(%(ids)b::bigint[], %(next_run_ats)b::timestamptz[], %(next_keys)b::text[])
     AS u(id, next_run_at, next_key)
WHERE s.id = u.id;

-- name: schedule_count_due
-- How many active schedules fall due by %(horizon)s, counting at most %(limit)s (the adaptive
-- lookahead of scheduler/tick.py: beyond the limit the answer changes nothing). An index-only
-- range scan of schedules_due_idx.
SELECT count(*)
FROM (SELECT 1 FROM schedules
      WHERE (NOT paused OR paused_until IS NOT NULL) AND next_run_at IS NOT NULL
        AND next_run_at <= %(horizon)s
      LIMIT %(limit)s) AS due;

-- name: schedule_due_lag
-- How far overdue the most overdue active schedule is (seconds; 0 when none is).
SELECT coalesce(extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - min(next_run_at)),
                0)::float8
FROM schedules
WHERE (NOT paused OR paused_until IS NOT NULL)
  AND next_run_at <= coalesce(%(now)s::timestamptz, now());

-- name: schedule_overdue
-- The overdue detector (scheduler/health.py, `tockwork schedules overdue`): active schedules
-- whose next occurrence is more than the threshold (after, in seconds) past, most overdue first.
-- A tick enqueues an occurrence and advances next_run_at in one transaction, so a next_run_at
-- in the past is an occurrence no job exists for: no replica ran, or none kept up. A range
-- scan of schedules_due_idx.
SELECT id, organization_id, key, subject, job_type, next_run_at, next_occurrence_key,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - next_run_at)::float8
FROM schedules
WHERE NOT paused AND next_run_at IS NOT NULL
  AND next_run_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(after)s)
ORDER BY next_run_at, id
LIMIT %(limit)s;

-- name: schedule_overdue_count
-- How many active schedules are overdue by more than the threshold (after, seconds), counting
-- at most limit of them (a scrape must stay cheap however far behind the scheduler is).
SELECT count(*)
FROM (SELECT 1 FROM schedules
      WHERE NOT paused AND next_run_at IS NOT NULL
        AND next_run_at < coalesce(%(now)s::timestamptz, now())
                          - make_interval(secs => %(after)s)
      LIMIT %(limit)s) AS overdue;

-- name: schedule_table_exists
-- The scheduler-lag probe of /healthz and /metrics: a database without the scheduler's
-- migrations has no lag to report.
SELECT to_regclass('schedules') IS NOT NULL;

-- template: schedule_get (for_update)
-- variant: schedule_get
-- variant: schedule_get_for_update   for_update
-- One schedule by %(id)s, or (id NULL) by %(key)s within %(organization_id)s (NULL: the
-- schedules of no organization). Optional filters written as "(param IS NULL OR col = param)":
-- one static query (procrastinate's list_jobs), and PostgreSQL folds the NULL tests of each
-- execution's custom plan away, so the id path stays a primary-key probe.
SELECT {{schedule_columns}}
FROM schedules
WHERE (%(id)s::bigint IS NULL OR id = %(id)s::bigint)
  AND (%(key)s::text IS NULL
       OR (key = %(key)s::text
           AND organization_id IS NOT DISTINCT FROM %(organization_id)s::uuid))
{{schedule_lock}};

-- fragment: schedule_lock if for_update
-- For a change: the row lock the tick takes too.
FOR NO KEY UPDATE

-- name: schedule_get_many
-- The schedules of a batch of jobs, by id, in one statement (the reminder path's still-due
-- check: scheduler/reminders.py). A deleted schedule has no row.
SELECT {{schedule_columns}}
FROM schedules
WHERE id = ANY(%(ids)b::bigint[]);

-- name: schedule_still_due_many
-- What the still-due rules read of a batch's schedules (scheduler/reminders.py): the few
-- columns a reminder's check needs, no JSON to decode; the whole row (schedule_get_many) only
-- for the schedules changed since their jobs were enqueued. A deleted schedule has no row.
SELECT id, paused, version, quiet_start, quiet_end, quiet_action, zone
FROM schedules
WHERE id = ANY(%(ids)b::bigint[]);

-- name: schedule_list
-- One page of schedules in id order (keyset: the ids after %(after)s), each filter optional. The organization filter has a flag of its own,
-- %(by_organization)s, because a NULL organization_id is a value to match (no organization).
SELECT {{schedule_columns}}
FROM schedules
WHERE (NOT %(by_organization)s::bool
       OR organization_id IS NOT DISTINCT FROM %(organization_id)s::uuid)
  AND (%(subject)s::text IS NULL OR subject = %(subject)s::text)
  AND (%(source)s::text IS NULL OR source = %(source)s::text)
  AND (%(after)s::bigint IS NULL OR id > %(after)s::bigint)
ORDER BY id
LIMIT %(limit)s;

-- name: schedule_set_overlap_jobs
-- The jobs each schedule of a batch enqueued last under an overlap policy (still active, or
-- just enqueued), as array literals, and the occurrences enqueued on demand (trigger now,
-- backfill) that the policy skipped.
UPDATE schedules AS s
SET overlap_job_ids = u.job_ids::bigint[],
    overlap_skipped_count = s.overlap_skipped_count + u.skipped
FROM unnest(%(ids)b::bigint[], %(job_ids)b::text[], %(skipped)b::int[])
     AS u(id, job_ids, skipped)
WHERE s.id = u.id;

-- name: schedule_delete_finished_once
-- Retention (scheduler/maintenance.py): one bounded batch of one-off schedules that finished
-- before the cutoff (the before parameter). Recurring schedules that finished are kept.
WITH doomed AS (
    SELECT id FROM schedules
    WHERE finished_at < %(before)s AND rule->>'kind' = 'once'
    LIMIT %(limit)s
)
DELETE FROM schedules WHERE id IN (SELECT id FROM doomed);

-- name: schedule_delete
DELETE FROM schedules WHERE id = %(id)s;
