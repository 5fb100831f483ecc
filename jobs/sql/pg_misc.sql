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

-- name: pg_server_identity
-- Which server this is and what its commits wait for (jobs/primary.py): the cluster's system
-- identifier (shared by a primary and its physical standbys), the timeline of the WAL it writes
-- (NULL on a standby; a promotion starts a new one), the synchronous standbys it is configured
-- to wait for, this session's commit level, the synchronous standbys attached now (NULL when
-- pg_stat_replication's sync_state is hidden from this role) and the standbys attached now.
SELECT s.system_identifier,
       CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint END,
       current_setting('synchronous_standby_names'),
       current_setting('synchronous_commit'),
       r.sync_standbys, r.standbys
FROM pg_control_system() AS s,
     (SELECT CASE WHEN count(*) FILTER (WHERE sync_state IS NULL) > 0 THEN NULL
                  ELSE count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')) END,
             count(*)
      FROM pg_stat_replication) AS r(sync_standbys, standbys);
