-- 0018: the registry of running processes (issue 26): every worker, scheduler, relay and
-- dashboard upserts its row at each of its heartbeats (one statement per heartbeat, never per
-- job) and deletes it when it stops; a row not seen within its stale_after is a process that
-- died without saying so, and is pruned 15 minutes later by the next heartbeat of any process.
-- queues holds {queue: concurrency} (a worker's; empty for the others).
CREATE TABLE processes (
    kind text NOT NULL,
    name text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    version text,
    queues jsonb NOT NULL DEFAULT '{}'::jsonb,
    jobs_in_hand integer NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    stale_after interval NOT NULL,
    PRIMARY KEY (kind, name)
);
