-- Named queries on job_queue_policies: how each queue is claimed (docs/jobs.md, "Fairness and
-- per-key concurrency"), loaded by jobs/queries.py.

-- name: job_queue_policy_set
-- Set a queue's policy. The notification (delivered at commit, channel tockwork_jobs, payload
-- '~policies': no queue name starts with '~') tells running workers to re-read which queues
-- have a policy at once (jobs/store.py, job_queue_policy_refresh).
WITH upserted AS (
    INSERT INTO job_queue_policies (queue, fair, concurrency_per_key, updated_at)
    VALUES (%(queue)s, %(fair)s, %(concurrency_per_key)s::int,
            coalesce(%(now)s::timestamptz, now()))
    ON CONFLICT (queue) DO UPDATE
    SET fair = excluded.fair,
        concurrency_per_key = excluded.concurrency_per_key,
        updated_at = excluded.updated_at
    RETURNING queue
)
SELECT queue, pg_notify('tockwork_jobs', '~policies') IS NOT NULL FROM upserted;

-- name: job_queue_policy_clear
-- Remove a queue's policy; notifies running workers as job_queue_policy_set does.
WITH deleted AS (
    DELETE FROM job_queue_policies WHERE queue = %(queue)s RETURNING queue
)
SELECT queue, pg_notify('tockwork_jobs', '~policies') IS NOT NULL FROM deleted;

-- name: job_queue_policy_list
SELECT queue, fair, concurrency_per_key FROM job_queue_policies ORDER BY queue;

-- name: job_queue_policy_refresh
-- What picks a worker's claim statements (jobs/store.py), in one statement: the queues that
-- have a policy (claimed by job_claim_fair), and whether any rate limit exists (without one,
-- plain queues are claimed by the lighter job_claim_unlimited). Re-read when a notification
-- says a policy or a limit changed ('~policies'), and at least every POLICY_REFRESH seconds in
-- case notifications were lost.
SELECT ARRAY(SELECT queue FROM job_queue_policies
             WHERE fair OR concurrency_per_key IS NOT NULL ORDER BY queue),
       EXISTS (SELECT 1 FROM job_rate_limits);

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

-- name: job_claim_fair_generic_plan
-- Before the job_claim_fair statements, in their transaction (SET LOCAL: until it ends, and
-- they are its last statements): their plans are generic, made once per connection. Once
-- psycopg prepares them (at the 5th execution), the server's auto mode keeps planning them
-- for each execution's parameters, and planning the per-key claim cost more than running it.
-- Measured on a 10,000-job webhooks queue (20 keys of 8, PostgreSQL 18): a claim finding
-- nothing cost the server 1.45 ms of CPU with custom plans, 0.20 ms generic; with a full
-- key's 492 jobs waiting, 1.70 against 0.55 ms; draining, 3.0 against 2.5 ms a claim of 128.
-- The plan changes nothing of what a claim returns.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true);
