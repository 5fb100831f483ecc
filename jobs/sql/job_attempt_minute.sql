-- Named queries on job_attempt_minutes (migration 0012): attempts per closed minute (UTC) and
-- outcome, rolled up from job_attempts by the built-in maintenance (jobs.maintenance.
-- rollup_attempts), never on the completion path.

-- name: job_attempt_minute_wanted
-- The minutes a rollup run computes, newest first: the closed minutes of the last
-- %(backfill)s seconds that have no row yet, and the latest %(recheck)s seconds of closed
-- minutes again, rolled up or not (an attempt whose transaction committed after its minute's
-- first rollup). A minute is closed once it ended %(settle)s seconds ago: its attempts'
-- transactions (finished_at is their start) have committed by then.
WITH bounds AS (
    SELECT date_trunc('minute', coalesce(%(now)s::timestamptz, now())
                                - make_interval(secs => %(settle)s::float8), 'UTC')
           AS closed_before
)
SELECT m.minute
FROM bounds AS b
CROSS JOIN generate_series(
    date_trunc('minute', b.closed_before - make_interval(secs => %(backfill)s::float8), 'UTC'),
    b.closed_before - interval '1 minute',
    interval '1 minute') AS m(minute)
LEFT JOIN job_attempt_minutes AS r ON r.minute = m.minute
WHERE r.minute IS NULL
   OR m.minute >= b.closed_before - make_interval(secs => %(recheck)s::float8)
ORDER BY m.minute DESC;

-- name: job_attempt_minute_roll
-- Count the attempts of the minutes in [%(start)s, %(stop)s) per outcome (the BRIN index on
-- finished_at reads only those minutes' blocks) and write one row per minute, an empty one for
-- a minute without attempts; a minute rolled up before is recomputed (idempotent: a duplicate
-- run writes the same counts, and takes the rows' locks in the same order, oldest first).
WITH counted AS (
    SELECT date_trunc('minute', finished_at, 'UTC') AS minute, outcome, count(*) AS n
    FROM job_attempts
    WHERE finished_at >= %(start)s::timestamptz AND finished_at < %(stop)s::timestamptz
    GROUP BY 1, 2
)
INSERT INTO job_attempt_minutes AS r (minute, attempts, outcomes, rolled_at)
SELECT m.minute, coalesce(sum(c.n), 0),
       coalesce(jsonb_object_agg(c.outcome, c.n) FILTER (WHERE c.outcome IS NOT NULL),
                '{}'::jsonb),
       coalesce(%(now)s::timestamptz, now())
FROM generate_series(%(start)s::timestamptz, %(stop)s::timestamptz - interval '1 minute',
                     interval '1 minute') AS m(minute)
LEFT JOIN counted AS c ON c.minute = m.minute
GROUP BY m.minute
ORDER BY m.minute
ON CONFLICT (minute) DO UPDATE
SET attempts = excluded.attempts, outcomes = excluded.outcomes, rolled_at = excluded.rolled_at;

-- name: job_attempt_minute_delete_before
-- The rollup's own retention: one bounded batch of minutes older than %(age)s seconds.
WITH doomed AS (
    SELECT minute FROM job_attempt_minutes
    WHERE minute < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(age)s::float8)
    ORDER BY minute
    LIMIT %(limit)s
)
DELETE FROM job_attempt_minutes WHERE minute IN (SELECT minute FROM doomed);
