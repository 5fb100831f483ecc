-- Named queries on the job_history table: the finished jobs (succeeded, cancelled, expired),
-- moved out of jobs by the statements that end them (jobs/sql/job.sql: job_complete,
-- job_cancel, job_supersede_by_keys) and partitioned by day of completed_at (jobs/partitions.py).

-- name: job_history_delete_before
-- Retention of the default partition (the days are dropped whole, jobs/partitions.py): one
-- bounded batch of the finished jobs that ended more than %(age)s seconds ago.
WITH doomed AS (
    SELECT ctid FROM job_history_default
    WHERE completed_at < coalesce(%(now)s::timestamptz, now())
                         - make_interval(secs => %(age)s::float8)
    LIMIT %(limit)s
)
DELETE FROM job_history_default WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed));
