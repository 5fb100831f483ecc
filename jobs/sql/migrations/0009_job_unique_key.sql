-- 0009: jobs.unique_key, unique while active: at most one job per (job type, unique key,
-- organization) is pending, retrying or leased at a time; once it succeeds, goes dead or is
-- cancelled, the key is free again (docs/jobs.md, "Unique while active").

-- The index is the guarantee: enqueue inserts with ON CONFLICT on it (never a lookup then an
-- insert), and requeue skips the jobs whose key an active job holds. The job type and the key
-- lead, so the lookups of enqueue and requeue (organization compared with IS NOT DISTINCT
-- FROM, which no index can use) still probe it by prefix. Rows without a unique key are not in
-- it: the jobs that do not use the feature pay nothing but the predicate.
ALTER TABLE jobs
    ADD COLUMN unique_key text,
    ADD CONSTRAINT jobs_unique_key_check CHECK (length(unique_key) BETWEEN 1 AND 512);

CREATE UNIQUE INDEX jobs_unique_active_uq ON jobs (job_type, unique_key, organization_id)
    NULLS NOT DISTINCT
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'retrying', 'leased');
