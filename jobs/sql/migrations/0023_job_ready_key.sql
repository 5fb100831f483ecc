-- 0023: ready jobs by concurrency key, for the per-key claim (jobs/sql/job.sql, job_claim_fair).

-- A queue with a per-key limit (job_queue_policies.concurrency_per_key) claimed its jobs in plain
-- order and dropped those of a full key by their concurrency_key, which no index held: each
-- was a heap visit at every claim for as long as the key stayed full. A slow webhook endpoint
-- is such a key, its waiting deliveries at the head of the queue: 500 of them read by every
-- claim at the end of a 10,000-delivery drain. With this index the claim walks the keys that
-- have room (one descent a key) and reads only their first jobs.
CREATE INDEX IF NOT EXISTS jobs_ready_key_idx
    ON jobs (queue, concurrency_key, priority DESC, run_at, id)
    WHERE status IN ('pending', 'retrying');
