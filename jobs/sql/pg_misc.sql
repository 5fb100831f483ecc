-- Named statements of the jobs component that touch no table (River's pg_misc.sql).

-- name: pg_set_transaction_read_only
-- The metrics collector reads inside one read-only transaction.
SET TRANSACTION READ ONLY;

-- name: pg_set_local_statement_timeout
-- For the current transaction only (the metrics scrape).
SELECT set_config('statement_timeout', %(timeout)s, true);
