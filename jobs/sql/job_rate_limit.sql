-- Named queries on the job_rate_limits table (global rate limits, jobs/limits.py), loaded by
-- jobs/queries.py. The claim itself (job_claim in job.sql) reads and spends the buckets.
-- A window's bucket holds at most 5% of its limit, at least one token: job_rate_limit_burst and
-- job_rate_limit_refill (schema.sql), the one place of that arithmetic, inlined by the planner.

-- name: job_rate_limit_set
-- Create or replace a limit; its buckets start full. A pause in force stays. Wakes the workers
-- of a limited queue, so a raised limit is used at once (a lowered one applies at the next
-- claim either way), and tells every running worker to re-read whether a limit exists
-- ('~policies', as job_queue_policy_set): the first limit of a database switches them from
-- job_claim_unlimited to job_claim at once.
WITH upserted AS (
    INSERT INTO job_rate_limits AS l (scope, name, per_second, per_minute, second_tokens,
                                      minute_tokens, refilled_at, pause_on_rate_limited, source,
                                      updated_at)
    VALUES (%(scope)s, %(name)s, %(per_second)s, %(per_minute)s::int,
            job_rate_limit_burst(%(per_second)s::int),
            CASE WHEN %(per_minute)s::int IS NOT NULL
                 THEN job_rate_limit_burst(%(per_minute)s::int) END,
            coalesce(%(now)s::timestamptz, now()), %(pause_on_rate_limited)s, %(source)s,
            coalesce(%(now)s::timestamptz, now()))
    ON CONFLICT (scope, name) DO UPDATE
    SET per_second = excluded.per_second,
        per_minute = excluded.per_minute,
        second_tokens = excluded.second_tokens,
        minute_tokens = excluded.minute_tokens,
        refilled_at = excluded.refilled_at,
        pause_on_rate_limited = excluded.pause_on_rate_limited,
        source = excluded.source,
        updated_at = excluded.updated_at
    RETURNING scope, name
)
-- '~policies' first: a worker re-reads before the queue's wake-up makes it claim.
SELECT scope, name,
       pg_notify('tockwork_jobs', '~policies') IS NOT NULL,
       CASE WHEN scope = 'queue' THEN pg_notify('tockwork_jobs', name) END IS NOT NULL
FROM upserted;

-- name: job_rate_limit_list
-- Every limit (or those of one source), with its buckets as of now.
SELECT scope, name, per_second, per_minute, pause_on_rate_limited, source,
       CASE WHEN paused_until > coalesce(%(now)s::timestamptz, now()) THEN paused_until END,
       job_rate_limit_refill(second_tokens, per_second, 1, refilled_at,
                             coalesce(%(now)s::timestamptz, now())),
       job_rate_limit_refill(minute_tokens, per_minute, 60, refilled_at,
                             coalesce(%(now)s::timestamptz, now())),
       updated_at
FROM job_rate_limits
WHERE (%(source)s::text IS NULL OR source = %(source)s::text)
ORDER BY scope, name;

-- name: job_rate_limit_clear
-- Remove a limit: its jobs start as fast as the workers take them, from the next claim on.
-- Notifies as job_rate_limit_set does (the last limit gone, workers claim without buckets).
DELETE FROM job_rate_limits
WHERE scope = %(scope)s AND name = %(name)s
RETURNING scope, name,
          pg_notify('tockwork_jobs', '~policies') IS NOT NULL,
          CASE WHEN scope = 'queue' THEN pg_notify('tockwork_jobs', name) END IS NOT NULL;

-- name: job_rate_limit_pause
-- In the completion transaction of attempts whose handler raised RateLimited: pause the limits
-- of their queues and job types that opt in, until now + the retry delay (a longer pause in
-- force is kept). Before pausing, the statement locks, in the claim's order (scope, name), the
-- rows the claim of the same transaction will lock too (queues, job_types; job_claim),
-- so both statements together take their row locks in one global order: no deadlock between
-- workers, whatever limits they pause.
WITH locked AS MATERIALIZED (
    SELECT scope, name
    FROM job_rate_limits
    WHERE (scope = 'queue' AND (name = ANY(%(pause_queues)b::text[])
                                OR name = ANY(%(queues)b::text[])))
       OR (scope = 'job_type' AND (name = ANY(%(pause_types)b::text[])
                                   OR %(job_types)b::text[] IS NULL
                                   OR name = ANY(%(job_types)b::text[])))
    ORDER BY scope, name
    FOR UPDATE
),
pauses AS (
    SELECT scope, name, max(coalesce(%(now)s::timestamptz, now()) + delay) AS until
    FROM (SELECT 'queue', q, d FROM unnest(%(pause_queues)b::text[], %(delays)b::interval[])
                                    AS p(q, d)
          UNION ALL
          SELECT 'job_type', t, d FROM unnest(%(pause_types)b::text[], %(delays)b::interval[])
                                       AS p(t, d)) AS p(scope, name, delay)
    GROUP BY scope, name
)
UPDATE job_rate_limits AS l
SET paused_until = greatest(l.paused_until, p.until),
    updated_at = coalesce(%(now)s::timestamptz, now())
FROM pauses AS p
-- The uncorrelated count runs first (an InitPlan), so every lock is taken before any update.
WHERE (SELECT count(*) FROM locked) >= 0
  AND l.scope = p.scope AND l.name = p.name AND l.pause_on_rate_limited
RETURNING l.scope, l.name, l.paused_until;

-- name: job_rate_limit_next_token
-- An idle worker's wake-up: the seconds until one of the limits that apply to ready jobs of these
-- queues lets a claim start some, the soonest first; NULL when no limit applies to ready jobs.
-- A limit paused, below half its bucket, or with less than half a bucket left in its one-second
-- window waits until it is unpaused, has refilled half its bucket, and the oldest claim of its
-- window has left it (half rather than one token: claimers wake at the same refill time, and
-- a claim then takes several tokens at once). A limit with half a bucket or more that a claim
-- spent from within the last second answers 0, claim now, when its ready jobs are not all held
-- back by another limit: a worker whose claim found the bucket empty and whose handlers are
-- done would otherwise sleep its whole poll interval while the bucket filled and overflowed
-- (measured with a bucket of 1 per cent of the limit: 666 starts/s against 1,000/s). Held back
-- by another limit: for a queue limit, its first 100 ready jobs all of job types that wait (a
-- bounded probe: a queue deep in held-back types is not scanned whole on every idle poll); for
-- a job type limit, its ready jobs all in queues that wait. Such a limit answers nothing, so
-- the wait is the other one's; so does one that no claim spent from for a second (its ready
-- jobs may be unclaimable for a reason no limit shows, a full concurrency key say: the poll
-- interval then, not a claim every few milliseconds).
WITH b AS MATERIALIZED (
    SELECT l.scope, l.name,
           greatest(
               extract(epoch FROM l.paused_until - coalesce(%(now)s::timestamptz, now()))::float8,
               (h.half - job_rate_limit_refill(l.second_tokens, l.per_second, 1, l.refilled_at,
                                               coalesce(%(now)s::timestamptz, now())))
               / l.per_second,
               (greatest(1, floor(job_rate_limit_burst(l.per_minute) / 2))
                - job_rate_limit_refill(l.minute_tokens, l.per_minute, 60, l.refilled_at,
                                        coalesce(%(now)s::timestamptz, now())))
               / (l.per_minute / 60.0),
               CASE WHEN l.per_second - job_rate_limit_window(
                             l.recent_at, l.recent_n, coalesce(%(now)s::timestamptz, now()))
                         < h.half
                    THEN extract(epoch FROM
                             (SELECT min(r.at) FROM unnest(l.recent_at) AS r(at)
                              WHERE r.at > coalesce(%(now)s::timestamptz, now())
                                           - interval '1 second')
                             + interval '1 second' - coalesce(%(now)s::timestamptz, now()))::float8
               END,
               0) AS wait,
           l.refilled_at > coalesce(%(now)s::timestamptz, now()) - interval '1 second' AS active
    FROM job_rate_limits AS l,
         LATERAL (SELECT greatest(1, floor(job_rate_limit_burst(l.per_second) / 2)) AS half) AS h
    WHERE (l.scope = 'queue' AND l.name = ANY(%(queues)b::text[]))
       OR (l.scope = 'job_type' AND (%(job_types)b::text[] IS NULL
                                     OR l.name = ANY(%(job_types)b::text[])))
),
waiting AS (
    SELECT coalesce(array_agg(name) FILTER (WHERE scope = 'queue'), '{}') AS queues,
           coalesce(array_agg(name) FILTER (WHERE scope = 'job_type'), '{}') AS job_types
    FROM b WHERE wait > 0
)
SELECT min(b.wait)
FROM b, waiting AS h
WHERE CASE WHEN b.scope = 'queue' AND b.wait > 0
           THEN EXISTS (SELECT 1 FROM jobs AS j
                        WHERE j.queue = b.name AND j.status IN ('pending', 'retrying')
                          AND j.run_at <= coalesce(%(now)s::timestamptz, now()))
           WHEN b.scope = 'queue'
           THEN b.active AND EXISTS (SELECT 1
                        FROM (SELECT j.job_type FROM jobs AS j
                              WHERE j.queue = b.name AND j.status IN ('pending', 'retrying')
                                AND j.run_at <= coalesce(%(now)s::timestamptz, now())
                              LIMIT 100) AS r
                        WHERE array_position(h.job_types, r.job_type) IS NULL)
           WHEN b.wait > 0
           THEN EXISTS (SELECT 1 FROM jobs AS j
                        WHERE j.queue = ANY(%(queues)b::text[]) AND j.job_type = b.name
                          AND j.status IN ('pending', 'retrying')
                          AND j.run_at <= coalesce(%(now)s::timestamptz, now()))
           ELSE b.active AND EXISTS (SELECT 1 FROM jobs AS j
                        WHERE j.queue = ANY(%(queues)b::text[]) AND j.job_type = b.name
                          AND array_position(h.queues, j.queue) IS NULL
                          AND j.status IN ('pending', 'retrying')
                          AND j.run_at <= coalesce(%(now)s::timestamptz, now())) END;
