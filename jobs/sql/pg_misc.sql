-- Named statements of the jobs component that touch no table (River's pg_misc.sql).

-- name: pg_set_transaction_read_only
-- The metrics collector reads inside one read-only transaction.
SET TRANSACTION READ ONLY;

-- name: pg_set_local_statement_timeout
-- For the current transaction only (the metrics scrape).
SELECT set_config('statement_timeout', %(timeout)s, true);

-- name: pg_session_jit_off
-- A worker's session: no JIT compilation (jobs/worker.py; a claim's cost estimate can pass
-- jit_above_cost on a big table, and compiling would take longer than running it).
SELECT set_config('jit', 'off', false);
