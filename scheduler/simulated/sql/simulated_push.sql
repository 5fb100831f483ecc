-- Queries of the simulated push provider (scheduler/simulated): its own table only.

-- name: simulated_push_insert_many
-- One multicast request's deliveries. The primary key is the provider's idempotency key: a
-- message delivered before comes back as not inserted (a duplicate, not delivered again). The
-- caller passes the rows sorted by key, so overlapping requests lock in one order.
INSERT INTO simulated_pushes (effect_key, job_id, schedule_id, occurrence_key, occurrence_at,
                              subject, message, attempt)
SELECT u.effect_key, u.job_id, u.schedule_id, u.occurrence_key, u.occurrence_at, u.subject,
       u.message, u.attempt
FROM unnest(%(effect_keys)b::text[], %(job_ids)b::bigint[], %(schedule_ids)b::bigint[],
            %(occurrence_keys)b::text[], %(occurrence_ats)b::timestamptz[],
            %(subjects)b::text[], %(messages)b::text[], %(attempts)b::int[])
     WITH ORDINALITY
     AS u(effect_key, job_id, schedule_id, occurrence_key, occurrence_at, subject, message,
          attempt, ord)
ORDER BY u.ord
ON CONFLICT (effect_key) DO NOTHING
RETURNING effect_key;

-- name: simulated_push_delivered
-- Check-before-send against the provider's own rows (they are the pushes' effect records,
-- SimulatedPush.delivery_is_effect_record): which of these keys were delivered.
SELECT effect_key FROM simulated_pushes WHERE effect_key = ANY(%(keys)b::text[]);
