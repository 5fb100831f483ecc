-- Named statements of the scheduler component that touch no table (River's pg_misc.sql).

-- name: pg_now
-- The database clock: production plans with one clock, the database's.
SELECT now();

-- name: pg_set_local_statement_timeout_health
-- For the current transaction only: each /healthz check runs in its own transaction, and
-- nothing stays on the session (a transaction-mode pooler would hand it to other clients).
SELECT set_config('statement_timeout', %(timeout)s, true);

-- name: pg_ping
SELECT 1;

-- name: pg_database_create
-- Development databases (scheduler/devdb.py): the placeholders take the database's name (a
-- psycopg.sql.Identifier) and an optional TEMPLATE clause.
CREATE DATABASE {} {}

-- name: pg_database_drop
DROP DATABASE IF EXISTS {} WITH (FORCE)

-- name: pg_tables_of_schema
-- The tables a freshly migrated test database holds (scheduler/pytest_plugin.py cleans them).
SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename;

-- name: pg_truncate_tables
-- The placeholder takes the tables (psycopg.sql.Identifier values joined by commas).
TRUNCATE {} RESTART IDENTITY CASCADE

-- name: pg_database_comment
-- The comment on a database, one row when it exists (scheduler/devdb.py: a demo drops only the
-- database it marked).
SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %(name)s;

-- name: pg_database_mark
-- The placeholders take the database's name (an Identifier) and the marker (a Literal).
COMMENT ON DATABASE {} IS {}

-- name: pg_maintenance_sync_lock
-- Serializes the sync of the built-in maintenance definitions for the transaction: every
-- scheduler replica syncs them when it starts, and two at once would both create a key. The
-- class is Tockwork's own ('tock', as the migrations' lock, object 1); this is object 2.
SELECT pg_advisory_xact_lock(1953457003, 2);

-- name: pg_replica_state
-- A read replica (--read-url: the dashboard's banner, healthz's replica check, the gauge
-- tockwork_replica_lag_seconds): whether the server is in recovery (false on a primary); its
-- replay lag in seconds, the time from the commit on the primary of the last transaction it
-- replayed to the now parameter (default: its clock), 0 when it has replayed all it received
-- (an idle primary sends nothing new), NULL on a primary or before it replayed any; whether a
-- WAL receiver runs (the row is visible to every role: without one it follows no primary); and
-- the receiver's status (NULL unless the role may read the details: pg_read_all_stats).
SELECT pg_is_in_recovery(),
       CASE WHEN NOT pg_is_in_recovery() THEN NULL
            WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE extract(epoch FROM coalesce(%(now)s::timestamptz, now())
                                    - pg_last_xact_replay_timestamp()) END::float8,
       EXISTS (SELECT FROM pg_stat_wal_receiver),
       (SELECT status FROM pg_stat_wal_receiver);

-- name: pg_session_generic_plans
-- The delivery's own connections (scheduler/queries.py plan_once_async): each prepared
-- statement planned once, with its generic plan, and that plan a probe by key of each table
-- it reads. Their statements take a batch's keys as arrays and read each table by its index
-- (a schedule by id, a key's effect records, a device by id or subject), the right shape
-- whatever the sizes; but a generic plan is made at the first execution, and a table a herd
-- fills from empty (job_effects) was scanned whole per row by the plan made while it was
-- empty (the server's CPU a delivery doubled). Without sequential scans the one plan is the
-- probe. A custom plan per execution cost 0.2-0.4 ms of the server's CPU (99-109 plans for
-- 127 calls, docs/performance.md).
-- A session whose zone is another name of UTC (utc: jobs.connection.UTC_ALIASES) is also set
-- to 'UTC' by its own name in the same round trip: the same rules, whose timestamps psycopg
-- loads faster.
SELECT set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('enable_seqscan', 'off', false),
       CASE WHEN %(utc)s::boolean THEN set_config('TimeZone', 'UTC', false) END;
