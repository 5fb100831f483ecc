-- Named queries on the job_attempts table (one row per finished attempt).

-- name: job_attempt_list
SELECT attempt, worker, started_at, finished_at, outcome, error_code, error_summary, duration_ms
FROM job_attempts WHERE job_id = %(id)s ORDER BY id;

-- name: job_attempt_delete_before
-- Retention: one bounded batch of attempt history older than %(age)s seconds.
WITH doomed AS (
    SELECT id FROM job_attempts
    WHERE finished_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(age)s::float8)
    LIMIT %(limit)s
)
DELETE FROM job_attempts WHERE id IN (SELECT id FROM doomed);
