-- 0016: expiry of late work (issue 24). A job may carry the instant after which it must not
-- start (expires_at: its run_at or occurrence plus its maximum lateness, set at enqueue); a
-- worker that claims it later does not run it but ends it 'expired' (jobs/worker.py), a
-- terminal state requeued like a dead letter. NULL for every job enqueued without one, so
-- the column costs the common job nothing (a NULL is a bit of the row's null bitmap) and no
-- index holds it.
ALTER TABLE jobs ADD COLUMN expires_at timestamptz;

-- The new status. NOT VALID, then VALIDATE: the check of the existing rows runs without
-- blocking writes (VALIDATE takes SHARE UPDATE EXCLUSIVE).
ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check CHECK (
    status IN ('pending', 'leased', 'retrying', 'succeeded', 'dead', 'cancelled', 'expired')
) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_status_check;

-- Expired jobs for inspection, requeue and retention, newest first (as jobs_dead_recent_idx).
CREATE INDEX jobs_expired_idx ON jobs (id) WHERE status = 'expired';
