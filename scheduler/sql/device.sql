-- Named queries on the devices table (scheduler/devices.py): the registry of the devices each
-- subject's reminders go to. Every time predicate takes %(now)s and falls back to the database
-- clock. A device is valid while invalidated_at is NULL.

-- fragment: device_columns
-- A device's columns in the order scheduler/devices.py's _device reads them.
id, organization_id, subject, channel, token, platform, created_at, last_success_at,
invalidated_at, invalid_reason, updated_at

-- name: device_upsert
-- Register a token: a new row, or the existing row of (channel, token) given to this subject
-- and organization, its invalidation cleared (the application registered it again: it is
-- alive) and its platform updated (kept when none is given). A registration that changes
-- nothing writes nothing (an application registers its token at every start): the update's
-- WHERE refuses it and the second branch reads the row instead. That read uses the statement's
-- snapshot, which may predate a concurrent insert of the same token that the upsert saw: then
-- no row comes back and the caller runs the statement again.
WITH upserted AS (
    INSERT INTO devices AS d (organization_id, subject, channel, token, platform, created_at,
                              updated_at)
    VALUES (%(organization_id)s::uuid, %(subject)s::text, %(channel)s::text, %(token)s::text,
            %(platform)s::text, coalesce(%(now)s::timestamptz, now()),
            coalesce(%(now)s::timestamptz, now()))
    ON CONFLICT (channel, token) DO UPDATE
    SET organization_id = excluded.organization_id,
        subject = excluded.subject,
        platform = coalesce(excluded.platform, d.platform),
        invalidated_at = NULL,
        invalid_reason = NULL,
        updated_at = excluded.updated_at
    WHERE d.organization_id IS DISTINCT FROM excluded.organization_id
       OR d.subject <> excluded.subject
       OR d.platform IS DISTINCT FROM coalesce(excluded.platform, d.platform)
       OR d.invalidated_at IS NOT NULL
    RETURNING {{device_columns}}
)
SELECT {{device_columns}} FROM upserted
UNION ALL
SELECT {{device_columns}}
FROM devices
WHERE channel = %(channel)s::text AND token = %(token)s::text
  AND NOT EXISTS (SELECT FROM upserted);

-- name: device_get
SELECT {{device_columns}}
FROM devices
WHERE id = %(id)s::bigint;

-- name: device_delete
DELETE FROM devices WHERE id = %(id)s::bigint RETURNING id;

-- name: device_list
-- Devices in id order after the keyset cursor %(after)s, each filter optional. The organization
-- filter has a flag of its own, %(by_organization)s, because a NULL organization_id is a value to
-- match (no organization).
SELECT {{device_columns}}
FROM devices
WHERE id > %(after)s::bigint
  AND (NOT %(by_organization)s::bool
       OR organization_id IS NOT DISTINCT FROM %(organization_id)s::uuid)
  AND (%(subject)s::text IS NULL OR subject = %(subject)s::text)
  AND (%(include_invalid)s::bool OR invalidated_at IS NULL)
ORDER BY id
LIMIT %(limit)s;

-- name: device_valid_for_subjects
-- The delivery read: the valid devices of a batch of (organization, subject) pairs, in one
-- statement (a probe of devices_subject_idx per pair). The pairs come without duplicates.
SELECT {{device_columns}}
FROM unnest(%(organization_ids)b::uuid[], %(subjects)b::text[])
     AS wanted(want_organization_id, want_subject)
JOIN devices
  ON subject = wanted.want_subject
 AND organization_id IS NOT DISTINCT FROM wanted.want_organization_id
WHERE invalidated_at IS NULL
ORDER BY id;

-- name: device_invalidate
-- Mark dead the given devices that are still valid, and return what the outbox fact of each one
-- newly marked says. The rows are locked in id order first (two deliveries invalidating
-- overlapping sets cannot deadlock), and a row another transaction invalidated meanwhile is
-- re-read after its commit and left out: one fact per invalidation, however many callers race.
-- A reason that quotes the token keeps it only as the text <token>.
WITH doomed AS MATERIALIZED (
    SELECT id
    FROM devices
    WHERE id = ANY(%(ids)b::bigint[]) AND invalidated_at IS NULL
    ORDER BY id
    FOR NO KEY UPDATE
)
UPDATE devices AS d
SET invalidated_at = coalesce(%(now)s::timestamptz, now()),
    invalid_reason = replace(u.reason, d.token, '<token>'),
    updated_at = coalesce(%(now)s::timestamptz, now())
FROM doomed
JOIN unnest(%(ids)b::bigint[], %(reasons)b::text[]) AS u(id, reason) ON u.id = doomed.id
WHERE d.id = doomed.id
RETURNING d.id, d.organization_id, d.subject, d.channel, d.platform, d.token, d.invalid_reason,
          d.invalidated_at;

-- name: device_mark_succeeded
-- Record a delivery's success on the given devices whose last_success_at is older than
-- %(every)s (or unset): in the common case no row qualifies and nothing is written. A row that
-- another transaction holds is skipped, not waited for: the timestamp is a hint, and the
-- delivery path never queues behind a registration or an invalidation.
WITH due AS MATERIALIZED ({{device_succeeded_due}})
{{device_succeeded_update}};

-- fragment: device_succeeded_due
SELECT id
FROM devices
WHERE id = ANY(%(ids)b::bigint[])
  AND (last_success_at IS NULL
       OR last_success_at <= coalesce(%(now)s::timestamptz, now()) - %(every)s::interval)
ORDER BY id
FOR NO KEY UPDATE SKIP LOCKED

-- fragment: device_succeeded_update
UPDATE devices AS d
SET last_success_at = coalesce(%(now)s::timestamptz, now())
FROM due
WHERE d.id = due.id

-- name: device_delivery_record
-- Record-after-send of a delivery (scheduler/delivery.py): effect keys and last successes in
-- one statement (one round trip); dead tokens go through device_invalidate (rare).
WITH {{jobs.job_effect_insert_checked}},
     due AS MATERIALIZED ({{device_succeeded_due}}),
     succeeded AS ({{device_succeeded_update}})
SELECT count(*) FROM effect_recorded;

-- fragment: device_delivery_targets if registry
devices AS dv
WHERE dv.subject = b.subject
  AND dv.organization_id IS NOT DISTINCT FROM b.organization_id
  AND dv.invalidated_at IS NULL

-- fragment: device_delivery_targets if not registry
(SELECT NULL::bigint, %(channel)s::text, b.subject) AS dv(id, channel, token)
WHERE b.subject IS NOT NULL

-- template: device_delivery_read (registry)
-- The delivery's one read of a batch of reminder jobs (scheduler/delivery.py), in one round
-- trip: one row per (job, device), a job without devices once with NULL device columns. Each
-- row has the database clock (unless the now parameter pins it), the job's schedule as
-- schedule_still_due_many reads it (NULL: deleted, or no schedule), a valid device of the
-- job's subject, its effect-once key and whether that key is recorded (check-before-send,
-- jobs' fragment). The key is scheduler.delivery.device_key's: 'push' then the job's suffix
-- (jobs.effects.effect_key after its effect name: the job's part first, so that a herd's keys
-- go in side by side), '/', the channel, '.' and the first 16 hex digits of the token's
-- SHA-256. A job leased before (jobs.Job.leased_before: a retry, a rate-limited run, a
-- requeue) is checked under the key's former form too ('push.<channel>.<digest>' then the
-- suffix, delivery._legacy_device_key), which a run of the former code may have recorded
-- before an upgrade: its legacy suffix is its suffix, NULL for a first claim (a herd's first
-- claims probe one key a device). With registry the devices are the subject's valid rows of
-- devices (as device_valid_for_subjects reads them); without, each subject is its own token on
-- the channel parameter (SubjectAsToken). OFFSET 0 keeps the devices a probe of
-- devices_subject_idx per job: pulled up into the join, the subquery was planned as a hash
-- join over every valid device (a 50,000-device scan for a batch of 500, 44 ms against 4).
-- variant: device_delivery_read_subject_tokens
-- variant: device_delivery_read   registry
SELECT b.job_id, coalesce(%(now)s::timestamptz, now()),
       s.id, s.paused, s.version, s.quiet_start, s.quiet_end, s.quiet_action, s.zone,
       t.id, t.channel, t.token, t.key,
       CASE WHEN {{jobs.job_effect_is_recorded key=t.key}} THEN true
            WHEN t.legacy_key IS NULL THEN false
            ELSE {{jobs.job_effect_is_recorded key=t.legacy_key}} END
FROM unnest(%(job_ids)b::bigint[], %(schedule_ids)b::bigint[], %(organization_ids)b::uuid[],
            %(subjects)b::text[], %(suffixes)b::text[], %(legacy_suffixes)b::text[])
     WITH ORDINALITY
     AS b(job_id, schedule_id, organization_id, subject, suffix, legacy_suffix, ord)
LEFT JOIN schedules AS s ON s.id = b.schedule_id
LEFT JOIN LATERAL (
    SELECT dv.id, dv.channel, dv.token,
           'push' || b.suffix || '/' || dv.channel || '.'
           || left(encode(sha256(convert_to(dv.token, 'UTF8')), 'hex'), 16) AS key,
           CASE WHEN b.legacy_suffix IS NOT NULL
                THEN 'push.' || dv.channel || '.'
                     || left(encode(sha256(convert_to(dv.token, 'UTF8')), 'hex'), 16)
                     || b.legacy_suffix END AS legacy_key
    FROM {{device_delivery_targets}}
    OFFSET 0
) AS t ON true
ORDER BY b.ord, t.id;
