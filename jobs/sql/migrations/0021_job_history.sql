-- 0021: finished jobs leave jobs (docs/scaling.md, "What lives where"). A job that succeeds, is
-- cancelled or expires is moved by the statement that ends it into job_history, partitioned by
-- day of completed_at like job_attempts (created ahead and dropped whole by the maintenance,
-- jobs.partitions), so jobs keeps only live work and dead letters.
--
-- Online: this migration only creates the empty table, its default partition and the view
-- jobs_all (catalog changes, no row read or written, no lock on jobs). The finished jobs jobs
-- already holds are not copied: they stay where they are, readable through jobs_all, their
-- idempotency keys still held by jobs_idempotency_uq, until the retention that already deletes
-- them in bounded batches (job_delete_finished) has aged them all out, at most
-- finished_retention later. Copying them would write each row again only to delete it as soon.
-- Every statement may run again (IF NOT EXISTS, OR REPLACE).

CREATE TABLE IF NOT EXISTS job_history (
    id bigint NOT NULL,
    organization_id uuid,
    queue text NOT NULL,
    job_type text NOT NULL,
    payload jsonb NOT NULL,
    idempotency_key text,
    status text NOT NULL,
    priority integer NOT NULL,
    run_at timestamptz NOT NULL,
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    locked_at timestamptz,
    locked_by text,
    locked_until timestamptz,
    lease_token bigint NOT NULL,
    last_error_code text,
    last_error_summary text,
    completed_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL,
    claim_id uuid,
    started_token bigint,
    unstarted_expiries smallint NOT NULL,
    concurrency_key text,
    trace_parent text,
    trace_state text,
    unique_key text,
    heartbeat_at timestamptz,
    expires_at timestamptz,
    CONSTRAINT job_history_status_check CHECK (status IN ('succeeded', 'cancelled', 'expired'))
) PARTITION BY RANGE (completed_at);

-- A job by id (the API, the CLI, the dashboard's job page and its newest-first pages).
CREATE INDEX IF NOT EXISTS job_history_id_idx ON job_history (id);
-- The idempotency check of an enqueue; type and key lead, so a lookup that compares the
-- organization with IS NOT DISTINCT FROM probes it by prefix (and a schedule's keys by range).
CREATE INDEX IF NOT EXISTS job_history_key_idx
    ON job_history (job_type, idempotency_key, organization_id)
    WHERE idempotency_key IS NOT NULL;
-- The dashboard's error code filter, newest first (as jobs_error_code_idx in jobs); only the
-- jobs that carry a code (retried before they ended, or cancelled with a reason).
CREATE INDEX IF NOT EXISTS job_history_error_code_idx ON job_history (last_error_code, id)
    WHERE last_error_code IS NOT NULL;
-- Retention of the default partition (rows are written in completion order).
CREATE INDEX IF NOT EXISTS job_history_completed_idx ON job_history USING brin (completed_at);

CREATE TABLE IF NOT EXISTS job_history_default PARTITION OF job_history DEFAULT
    WITH (autovacuum_vacuum_insert_scale_factor = 0.05);

-- Every job, live or finished: what readers that show any job read (job_get, job_list, the
-- dashboard's pages). The claim, the completions and the maintenance read jobs itself.
CREATE OR REPLACE VIEW jobs_all AS
SELECT id, organization_id, queue, job_type, payload, idempotency_key, status, priority, run_at,
       attempts, max_attempts, locked_at, locked_by, locked_until, lease_token, last_error_code,
       last_error_summary, completed_at, created_at, claim_id, started_token,
       unstarted_expiries, concurrency_key, trace_parent, trace_state, unique_key, heartbeat_at,
       expires_at
FROM jobs
UNION ALL
SELECT id, organization_id, queue, job_type, payload, idempotency_key, status, priority, run_at,
       attempts, max_attempts, locked_at, locked_by, locked_until, lease_token, last_error_code,
       last_error_summary, completed_at, created_at, claim_id, started_token,
       unstarted_expiries, concurrency_key, trace_parent, trace_state, unique_key, heartbeat_at,
       expires_at
FROM job_history;
