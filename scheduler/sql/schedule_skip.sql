-- Named queries on the schedule_skips table: occurrences not delivered, kept visible.

-- name: schedule_skip_record
INSERT INTO schedule_skips (schedule_id, occurrence_key, occurrence_at, kind, reason,
                            recorded_at)
SELECT * , %(now)s::timestamptz
FROM unnest(%(ids)b::bigint[], %(keys)b::text[], %(ats)b::timestamptz[], %(kinds)b::text[],
            %(reasons)b::text[]);

-- name: schedule_skip_record_counted
-- The skips of a batch of run-time checks (scheduler/reminders.py), each one counted in its
-- schedule's skipped_count, in one statement. The schedules are locked in id order first, so
-- two workers recording skips of the same schedules wait for each other instead of
-- deadlocking; a schedule deleted meanwhile keeps its skips and has no count to bump.
WITH skipped AS (
    INSERT INTO schedule_skips (schedule_id, occurrence_key, occurrence_at, kind, reason,
                                recorded_at)
    SELECT u.*, %(now)s::timestamptz
    FROM unnest(%(ids)b::bigint[], %(keys)b::text[], %(ats)b::timestamptz[],
                %(kinds)b::text[], %(reasons)b::text[])
         AS u(schedule_id, occurrence_key, occurrence_at, kind, reason)
    RETURNING schedule_id
),
locked AS MATERIALIZED (
    SELECT id FROM schedules WHERE id = ANY(%(ids)b::bigint[]) ORDER BY id FOR NO KEY UPDATE
),
counts AS (
    SELECT schedule_id AS id, count(*)::int AS n FROM skipped GROUP BY schedule_id
)
UPDATE schedules AS s
SET skipped_count = s.skipped_count + c.n
FROM counts AS c
WHERE s.id = c.id AND s.id IN (SELECT id FROM locked);

-- name: schedule_skip_delete_before
-- Retention of the default partition (scheduler/maintenance.py; the days are dropped whole):
-- one bounded batch of skips recorded before %(before)s.
WITH doomed AS (
    SELECT ctid FROM schedule_skips_default WHERE recorded_at < %(before)s LIMIT %(limit)s
)
DELETE FROM schedule_skips_default WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed));
