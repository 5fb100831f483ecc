-- Named queries on the schedule_skips table: occurrences not delivered, kept visible.

-- name: schedule_skip_record
INSERT INTO schedule_skips (schedule_id, occurrence_key, occurrence_at, kind, reason,
                            recorded_at)
SELECT * , %(now)s::timestamptz
FROM unnest(%(ids)b::bigint[], %(keys)b::text[], %(ats)b::timestamptz[], %(kinds)b::text[],
            %(reasons)b::text[]);

-- name: schedule_skip_delete_before
-- Retention (scheduler/maintenance.py): one bounded batch of skips recorded before %(before)s.
WITH doomed AS (
    SELECT id FROM schedule_skips WHERE recorded_at < %(before)s LIMIT %(limit)s
)
DELETE FROM schedule_skips WHERE id IN (SELECT id FROM doomed);
