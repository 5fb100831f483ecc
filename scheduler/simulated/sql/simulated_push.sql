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

-- name: simulated_push_channel_insert_many
-- The simulated channel's deliveries (one row per device notified), keyed like the provider's.
-- Only the keys not inserted come back (delivered before: duplicates), so a batch of new
-- messages returns no row (it returned every inserted key: 500 rows a batch to send and parse
-- for nothing). EXCEPT, not an anti-join: it is hashed or sorted whatever the estimates, never
-- a nested loop over both lists. The caller passes distinct keys.
WITH inserted AS (
    INSERT INTO simulated_pushes (effect_key, job_id, schedule_id, occurrence_key, subject,
                                  token, title, message)
    SELECT u.effect_key, u.job_id, u.schedule_id, u.occurrence_key, u.subject, u.token,
           u.title, u.message
    FROM unnest(%(effect_keys)b::text[], %(job_ids)b::bigint[], %(schedule_ids)b::bigint[],
                %(occurrence_keys)b::text[], %(subjects)b::text[], %(tokens)b::text[],
                %(titles)b::text[], %(messages)b::text[])
         WITH ORDINALITY
         AS u(effect_key, job_id, schedule_id, occurrence_key, subject, token, title, message,
              ord)
    ORDER BY u.ord
    ON CONFLICT (effect_key) DO NOTHING
    RETURNING effect_key
)
SELECT effect_key FROM unnest(%(effect_keys)b::text[]) AS k(effect_key)
EXCEPT
SELECT effect_key FROM inserted;
