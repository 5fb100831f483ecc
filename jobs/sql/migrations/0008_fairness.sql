-- 0008: per-queue fairness across organizations and per-key concurrency (docs/jobs.md,
-- "Fairness and per-key concurrency").

-- A queue's claim policy, read by every worker (so all of them agree): fair = round robin
-- across the organizations with ready work; concurrency_per_key = at most that many leased jobs
-- per jobs.concurrency_key in the queue. A queue without a row is claimed in plain order. The
-- rows are also the claim's mutex for per-key limits: a claim of a limited queue locks its row
-- in a statement of its own before choosing jobs (jobs/store.py, "per-key limits").
CREATE TABLE job_queue_policies (
    queue text PRIMARY KEY,
    fair boolean NOT NULL DEFAULT false,
    concurrency_per_key integer,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_queue_policies_queue_check CHECK (queue ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    CONSTRAINT job_queue_policies_concurrency_check CHECK (concurrency_per_key >= 1)
);

-- The key a per-key limit counts (for example a user id); set at enqueue, never updated, and not
-- indexed: the leased rows it is counted over are few (jobs_leased_idx), and updates stay HOT.
ALTER TABLE jobs
    ADD COLUMN concurrency_key text,
    ADD CONSTRAINT jobs_concurrency_key_check CHECK (length(concurrency_key) BETWEEN 1 AND 512);

-- Ready work by organization (a missing organization as the nil UUID: one organization), in
-- claim order within each: the fair claim's loose index scan over the organizations of a queue
-- and its pick of each one's first jobs. Partial on the ready statuses like jobs_ready_idx, so
-- it holds only waiting rows; status is already in every partial predicate, so this index makes
-- no update un-HOT that was HOT before.
CREATE INDEX jobs_ready_org_idx
    ON jobs (queue, (coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid)),
             priority DESC, run_at, id)
    WHERE status IN ('pending', 'retrying');
