-- Named queries on the job_effects table (side effects recorded once, jobs/effects.py).

-- name: job_effect_record
INSERT INTO job_effects (effect_key, job_id, detail, recorded_at)
VALUES (%(effect_key)s, %(job_id)s::bigint, %(detail)s::jsonb, coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (effect_key) DO NOTHING
RETURNING effect_key;

-- name: job_effect_delete_before
-- Retention: one bounded batch of effect records older than %(age)s seconds.
WITH doomed AS (
    SELECT effect_key FROM job_effects
    WHERE recorded_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(age)s::float8)
    LIMIT %(limit)s
)
DELETE FROM job_effects WHERE effect_key IN (SELECT effect_key FROM doomed);

-- name: job_effect_recorded
-- Check-before-send: which of these keys are already recorded (one round trip for a batch).
SELECT effect_key FROM job_effects WHERE effect_key = ANY(%(keys)b::text[]);

-- name: job_effect_record_many
-- Record-after-send (or in-transaction dedupe) for a batch: the keys inserted now come back.
-- The caller passes distinct keys in sorted order, so two transactions recording overlapping
-- batches wait for each other in one order instead of deadlocking.
{{job_effect_insert_many}};

-- fragment: job_effect_insert_many
-- Also a data-modifying CTE of the scheduler's delivery record (device_delivery_record).
INSERT INTO job_effects (effect_key, job_id, recorded_at)
SELECT k.effect_key, k.job_id, coalesce(%(now)s::timestamptz, now())
FROM unnest(%(keys)b::text[], %(job_ids)b::bigint[]) WITH ORDINALITY AS k(effect_key, job_id, ord)
ORDER BY k.ord
ON CONFLICT (effect_key) DO NOTHING
RETURNING effect_key

-- fragment: job_effect_is_recorded
-- Check-before-send inside another statement (the scheduler's delivery read): whether the
-- effect key the argument names is recorded. A scalar subquery, a probe of the primary key per
-- row: an EXISTS may be planned as a hashed subplan, which reads the whole table (measured: a
-- 50,000-row job_effects read for each batch of 500).
(SELECT true FROM job_effects WHERE effect_key = {{key}}) IS NOT NULL
