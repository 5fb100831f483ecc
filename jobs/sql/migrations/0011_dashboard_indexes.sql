-- 0011: what the operator dashboard needs at ten million jobs (docs/dashboard.md, "Fast on big
-- tables"): the workers' last heartbeat, and three small partial indexes.

-- When a lease was last extended (job_heartbeat sets it): the dashboard shows each worker's
-- heartbeat age as now - greatest(heartbeat_at, locked_at), so a value left by an earlier lease
-- never hides a fresh claim. Not indexed: no index needs to change when it does.
ALTER TABLE jobs ADD COLUMN heartbeat_at timestamptz;

-- The overview's per-queue retrying count, index-only (it used to recheck every ready row of
-- the queue in the heap). Only retrying rows are indexed, and a row enters it with a status
-- change, which is never a HOT update anyway (the status is in partial-index predicates).
CREATE INDEX jobs_retrying_idx ON jobs (queue) WHERE status = 'retrying';

-- Dead letters newest first (the Dead letters page, a status=dead filter): an ordered scan that
-- stops after one page, where jobs_dead_idx (queue, job_type, completed_at) would be read whole
-- and sorted. Only dead rows.
CREATE INDEX jobs_dead_recent_idx ON jobs (id) WHERE status = 'dead';

-- The Jobs page's error-code filter, newest first: an ordered scan of the matching rows, and a
-- bounded index-only count. Only rows that failed at least once carry a code.
CREATE INDEX jobs_error_code_idx ON jobs (last_error_code, id) WHERE last_error_code IS NOT NULL;

-- Dead letters of one organization, newest first (the Jobs and Dead letters pages of a
-- multi-tenant operator). Only dead rows: an index of every row's organization would add an
-- entry to every version a claim or a completion writes.
CREATE INDEX jobs_dead_organization_idx ON jobs (organization_id, id)
    WHERE status = 'dead' AND organization_id IS NOT NULL;

-- An error code goes with a status (retrying, dead, or succeeded after a retry): without these
-- statistics the planner multiplies the two selectivities and picks a plan for a few rows where
-- there are many (a bitmap AND of both indexes read whole, then a sort).
CREATE STATISTICS jobs_status_error_code_stats (mcv) ON status, last_error_code FROM jobs;
