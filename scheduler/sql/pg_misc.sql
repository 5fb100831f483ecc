-- Named statements of the scheduler component that touch no table (River's pg_misc.sql).

-- name: pg_now
-- The database clock: production plans with one clock, the database's.
SELECT now();

-- name: pg_set_statement_timeout
-- For the whole session (the /healthz checks run on one short-lived connection).
SELECT set_config('statement_timeout', %(timeout)s, false);

-- name: pg_ping
SELECT 1;
