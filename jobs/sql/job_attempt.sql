-- Named queries on the job_attempts table (one row per finished attempt).

-- name: job_attempt_list
SELECT attempt, worker, started_at, finished_at, outcome, error_code, error_summary, duration_ms
FROM job_attempts WHERE job_id = %(id)s ORDER BY id;

-- name: job_attempt_delete_before
-- Retention of the default partition (the days are dropped whole, jobs/partitions.py): one
-- bounded batch of attempt history older than %(age)s seconds.
WITH doomed AS (
    SELECT ctid FROM job_attempts_default
    WHERE finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(age)s::float8)
    LIMIT %(limit)s
)
DELETE FROM job_attempts_default WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed));

-- name: job_attempt_written
-- After a lost reply (jobs/worker.py): which of these attempts a worker's job_complete wrote
-- before the connection died. An attempt is known by its job, attempt number and the instant
-- its handler started (stamped by the worker); only job_complete writes a worker's outcome or
-- 'fenced' for it (the reaper and a release write 'lease_expired' or 'interrupted').
SELECT a.job_id, a.outcome
FROM job_attempts AS a
JOIN unnest(%(ids)b::bigint[], %(attempts)b::int[], %(started)b::timestamptz[])
     AS t(id, attempt, started_at)
  ON a.job_id = t.id AND a.attempt = t.attempt AND a.started_at = t.started_at
WHERE a.job_id = ANY(%(ids)b::bigint[])
  AND a.worker = %(worker)s
  AND a.outcome NOT IN ('lease_expired', 'interrupted');

-- name: job_attempt_prepare_id_index
-- Before migration 0020 (jobs.partitions.prepare): the index of ids each partition has, built
-- on the old table without blocking writers; the migration adopts it (the table becomes the
-- default partition).
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_attempts_default_id_idx ON job_attempts (id);
