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

-- name: pg_session_time_zone_utc
-- A worker's session whose zone is another name of UTC (jobs/worker.py,
-- jobs.connection.UTC_ALIASES): 'UTC', the same rules, for which psycopg loads timestamps faster.
SELECT set_config('TimeZone', 'UTC', false);

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

-- Time partitions of the history tables (jobs/partitions.py). The DDL names its tables through
-- psycopg.sql: {parent} and {partition} are identifiers, {start} and {stop} literals.

-- name: pg_partition_list
-- The day partitions of a partitioned table (named parent_pYYYYMMDD), the default one aside.
SELECT c.relname
FROM pg_inherits AS i
JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = %(parent)s::regclass
  AND c.relname ~ '_p[0-9]{8}$'
ORDER BY c.relname;

-- name: pg_partition_create
-- A day's table, standalone first: ATTACH then takes a SHARE UPDATE EXCLUSIVE lock on the
-- parent (inserts go on), where CREATE TABLE ... PARTITION OF would take an ACCESS EXCLUSIVE one.
CREATE TABLE {partition} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS);

-- name: pg_partition_attach
-- Reads the default partition for rows of the new day (none normally: the day is ahead).
ALTER TABLE {parent} ATTACH PARTITION {partition} FOR VALUES FROM ({start}) TO ({stop});

-- name: pg_partition_count
SELECT count(*) FROM {partition};

-- name: pg_partition_drop
DROP TABLE {partition};

-- name: pg_set_local_lock_timeout
-- For the current transaction only: partition DDL gives up rather than queue every writer of
-- the table behind its lock while a long transaction holds the table.
SELECT set_config('lock_timeout', %(timeout)s, true);

-- name: pg_partition_now
-- The database clock, when the partition maintenance is given no instant.
SELECT now();

-- name: pg_relation_kind
-- 'r' for a plain table, 'p' for a partitioned one (jobs.partitions.prepare).
SELECT relkind::text FROM pg_class WHERE oid = to_regclass(%(name)s);
