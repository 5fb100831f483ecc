-- Named queries of the metrics collector (jobs/metrics.py), run once per scrape on the
-- collector's own connection, inside one read-only transaction with a statement timeout.
-- The queue gauges come from the `queue_stats` query of queries.sql, so `tockwork stats` and
-- /metrics always show the same figures.

-- name: outbox_exists
-- The outbox table arrives with its own migration; until then there are no outbox gauges.
-- has_dead: whether events can be set aside (dead_at), which then no longer count as pending.
SELECT to_regclass('outbox_events') IS NOT NULL AS present,
       EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = to_regclass('outbox_events') AND attname = 'dead_at'
                 AND NOT attisdropped) AS has_dead;

-- name: outbox_gauges
-- Pending events (neither processed nor set aside), the high-watermark lag (the age of the
-- oldest pending event, seconds, 0 when none) and the dead count. Served by the pending and
-- dead partial indexes.
SELECT count(*) FILTER (WHERE dead_at IS NULL)::bigint AS pending,
       coalesce(extract(epoch FROM coalesce(%(now)s::timestamptz, now())
                - min(occurred_at) FILTER (WHERE dead_at IS NULL)), 0)::float8 AS oldest_age,
       count(*) FILTER (WHERE dead_at IS NOT NULL)::bigint AS dead
FROM outbox_events
WHERE processed_at IS NULL;

-- name: outbox_gauges_no_dead
-- The same, for an outbox table without dead_at.
SELECT count(*)::bigint AS pending,
       coalesce(extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - min(occurred_at)),
                0)::float8 AS oldest_age,
       NULL::bigint AS dead
FROM outbox_events
WHERE processed_at IS NULL;

-- name: schedules_exist
SELECT to_regclass('schedules') IS NOT NULL;
