-- Named queries on the job_effects table (side effects recorded once, jobs/effects.py).

-- fragment: job_effect_days
-- The days (UTC) under which a record made at the instant effect_at.at writes its key: its own day, and
-- within an hour of midnight the next day too (a guard row). The table is partitioned by day, so
-- its primary key is (effect_key, recorded_on): unique per day only. Two records of one key on
-- either side of midnight would each find nothing in the other's day (neither committed yet):
-- the guard row makes the earlier one write under the later one's day, where the primary key
-- makes the later one wait for it and then skip. A key recorded before (committed) is found by
-- the NOT EXISTS over every day. A record is new when all its rows went in.
SELECT (t.at AT TIME ZONE 'UTC')::date AS day FROM effect_at AS t
UNION
SELECT ((t.at + interval '1 hour') AT TIME ZONE 'UTC')::date FROM effect_at AS t

-- name: job_effect_record
WITH effect_at AS (SELECT coalesce(%(now)s::timestamptz, now()) AS at),
effect_days AS ({{job_effect_days}}),
written AS (
    INSERT INTO job_effects (effect_key, job_id, detail, recorded_at, recorded_on)
    SELECT %(effect_key)s, %(job_id)s::bigint, %(detail)s::jsonb, t.at, d.day
    FROM effect_at AS t CROSS JOIN effect_days AS d
    WHERE NOT EXISTS (SELECT FROM job_effects AS e WHERE e.effect_key = %(effect_key)s)
    ORDER BY d.day
    ON CONFLICT (effect_key, recorded_on) DO NOTHING
    RETURNING effect_key
)
SELECT effect_key FROM written
GROUP BY effect_key HAVING count(*) = (SELECT count(*) FROM effect_days);

-- name: job_effect_delete_before
-- Retention of the default partition (the days are dropped whole, jobs/partitions.py): one
-- bounded batch of effect records older than %(age)s seconds.
WITH doomed AS (
    SELECT effect_key, recorded_on FROM job_effects_default
    WHERE recorded_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(age)s::float8)
    LIMIT %(limit)s
)
DELETE FROM job_effects_default
WHERE (effect_key, recorded_on) IN (SELECT effect_key, recorded_on FROM doomed);

-- name: job_effect_recorded
-- Check-before-send: which of these keys are already recorded (one round trip for a batch; a
-- key written with its guard row comes back twice).
SELECT effect_key FROM job_effects WHERE effect_key = ANY(%(keys)b::text[]);

-- name: job_effect_record_many
-- Record-after-send (or in-transaction dedupe) for a batch: the keys inserted now come back.
-- The caller passes distinct keys in sorted order, so two transactions recording overlapping
-- batches wait for each other in one order instead of deadlocking (a key's days in order too).
WITH {{job_effect_insert_many}}
SELECT effect_key FROM effect_recorded;

-- fragment: job_effect_insert_many
-- The CTEs of a batch's record, ending in effect_recorded (the keys new now). The days and
-- the guard row: job_effect_days. The keys already recorded on any day are looked up once, by
-- the array (one scan of each day's primary key): a NOT EXISTS probe per key and day took
-- 190 ms per 1,000 keys with 38 days of partitions, this 44 ms (32 ms in one table).
effect_known AS MATERIALIZED (
    SELECT effect_key FROM job_effects WHERE effect_key = ANY(%(keys)b::text[])
),
{{job_effect_insert_rows unknown=job_effect_unknown}}

-- fragment: job_effect_insert_checked
-- The same record for keys the caller checked on every day just before (check-before-send,
-- job_effect_is_recorded) and then sent: the scheduler's delivery record
-- (device_delivery_record), one round trip with its other writes. Without effect_known: a key
-- recorded on another day since the check can only be another run of the same job racing this
-- one, and its second row (under another day) changes no answer of "is it recorded"; within
-- a day the primary key keeps one row a key as always. Which keys are new is not read by that
-- caller. The known-keys read it leaves out was planned as a scan of the day's partition (its
-- rows filtered by the array) while the partition was small by its statistics, which a herd's
-- day is when it starts: 4.3 ms of a 10.6 ms record of 500 keys at 5,862 rows, growing with
-- the day (docs/performance.md, issue 22's fourth pass).
{{job_effect_insert_rows unknown=}}

-- fragment: job_effect_unknown
WHERE NOT EXISTS (SELECT FROM effect_known AS e WHERE e.effect_key = k.effect_key)

-- fragment: job_effect_insert_rows
-- The insert of job_effect_insert_many and job_effect_insert_checked; unknown filters out the
-- keys recorded before.
effect_at AS (SELECT coalesce(%(now)s::timestamptz, now()) AS at),
effect_days AS ({{job_effect_days}}),
effect_written AS (
    INSERT INTO job_effects (effect_key, job_id, recorded_at, recorded_on)
    SELECT k.effect_key, k.job_id, t.at, d.day
    FROM unnest(%(keys)b::text[], %(job_ids)b::bigint[]) WITH ORDINALITY
         AS k(effect_key, job_id, ord)
    CROSS JOIN effect_at AS t CROSS JOIN effect_days AS d
    {{unknown}}
    ORDER BY k.ord, d.day
    ON CONFLICT (effect_key, recorded_on) DO NOTHING
    RETURNING effect_key
),
effect_recorded AS (
    SELECT effect_key FROM effect_written
    GROUP BY effect_key HAVING count(*) = (SELECT count(*) FROM effect_days)
)

-- fragment: job_effect_is_recorded
-- Check-before-send inside another statement (the scheduler's delivery read): whether the
-- effect key the argument names is recorded. A scalar subquery, a probe of each day's primary
-- key per row (LIMIT 1: a key may have its guard row): an EXISTS may be planned as a hashed
-- subplan, which reads the whole table (measured: a 50,000-row job_effects read for each batch
-- of 500).
(SELECT true FROM job_effects WHERE effect_key = {{key}} LIMIT 1) IS NOT NULL

-- name: job_effect_prepare_day
-- Before migration 0020 (jobs.partitions.prepare): the partition key. A constant default for the
-- rows already there (no rewrite); new rows get the day they are recorded.
ALTER TABLE job_effects
    ADD COLUMN IF NOT EXISTS recorded_on date NOT NULL DEFAULT ((now() AT TIME ZONE 'UTC')::date);

-- name: job_effect_prepare_day_index
-- Before migration 0020: the unique index of each partition, built without blocking writers;
-- the migration makes it the default partition's primary key.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS job_effects_default_pkey
    ON job_effects (effect_key, recorded_on);
