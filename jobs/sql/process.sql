-- Named queries on the processes table: the registry of running processes (jobs/processes.py).
-- A process upserts its row at each heartbeat and deletes it when it stops; a row is live while
-- last_seen_at + stale_after is in the future.

-- name: process_beat
-- One heartbeat of one process: its row, inserted or refreshed. Rows stale for 15 minutes
-- (their process died without deleting them) are pruned in the same statement, skipping any
-- another process is pruning at the same moment.
WITH pruned AS (
    DELETE FROM processes
    WHERE (kind, name) IN (
        SELECT kind, name FROM processes
        WHERE last_seen_at + stale_after
              < coalesce(%(now)s::timestamptz, now()) - interval '15 minutes'
        FOR UPDATE SKIP LOCKED
    )
)
INSERT INTO processes AS p (kind, name, host, pid, version, queues, jobs_in_hand,
                            started_at, last_seen_at, stale_after)
VALUES (%(kind)s, %(name)s, %(host)s, %(pid)s, %(version)s, %(queues)s, %(jobs_in_hand)s,
        coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()),
        %(stale_after)s::interval)
ON CONFLICT (kind, name) DO UPDATE
SET host = excluded.host, pid = excluded.pid, version = excluded.version,
    queues = excluded.queues, jobs_in_hand = excluded.jobs_in_hand,
    -- a restarted process under the same name starts again
    started_at = CASE WHEN p.pid = excluded.pid AND p.host = excluded.host THEN p.started_at
                      ELSE excluded.started_at END,
    last_seen_at = excluded.last_seen_at, stale_after = excluded.stale_after;

-- name: process_forget
-- A process that stops deletes its row.
DELETE FROM processes WHERE kind = %(kind)s AND name = %(name)s;

-- name: process_list
-- The registry, live processes first (then by kind and name); the stale ones (not yet pruned)
-- only when asked for. Bounded: a registry holds a few hundred rows at most.
SELECT kind, name, host, pid, version, queues, jobs_in_hand, started_at, last_seen_at,
       last_seen_at + stale_after >= coalesce(%(now)s::timestamptz, now()) AS live,
       extract(epoch FROM coalesce(%(now)s::timestamptz, now()) - last_seen_at)::float8
           AS seen_age
FROM processes
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(include_stale)s OR last_seen_at + stale_after >= coalesce(%(now)s::timestamptz, now()))
ORDER BY last_seen_at + stale_after >= coalesce(%(now)s::timestamptz, now()) DESC, kind, name
LIMIT 1000;

-- name: process_queue_workers
-- Per queue served by a live worker: how many live workers serve it and their concurrency.
SELECT q.key AS queue, count(*) AS workers, sum(q.value::int)::int AS concurrency
FROM processes AS p, jsonb_each_text(p.queues) AS q
WHERE p.kind = 'worker'
  AND p.last_seen_at + p.stale_after >= coalesce(%(now)s::timestamptz, now())
GROUP BY q.key
ORDER BY q.key;
