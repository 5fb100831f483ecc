-- Named queries on job_queue_policies: how each queue is claimed (docs/jobs.md, "Fairness and
-- per-key concurrency"), loaded by jobs/queries.py.

-- name: job_queue_policy_set
INSERT INTO job_queue_policies (queue, fair, concurrency_per_key, updated_at)
VALUES (%(queue)s, %(fair)s, %(concurrency_per_key)s::int, coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (queue) DO UPDATE
SET fair = excluded.fair,
    concurrency_per_key = excluded.concurrency_per_key,
    updated_at = excluded.updated_at;

-- name: job_queue_policy_clear
DELETE FROM job_queue_policies WHERE queue = %(queue)s RETURNING queue;

-- name: job_queue_policy_list
SELECT queue, fair, concurrency_per_key FROM job_queue_policies ORDER BY queue;

-- name: job_queue_policy_lock
-- The mutex of per-key limits, in a statement of its own before job_claim_fair: under READ
-- COMMITTED that claim's snapshot is then taken after every earlier holder committed, so the
-- leases it counts per key include theirs. (Taken inside the claim statement itself, a lock
-- would not help: the snapshot would predate the other claimer's commit.) In queue order, so
-- two claimers of the same queues never deadlock.
SELECT queue FROM job_queue_policies
WHERE queue = ANY(%(queues)s::text[]) AND concurrency_per_key IS NOT NULL
ORDER BY queue
FOR UPDATE;
