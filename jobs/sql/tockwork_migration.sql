-- Named queries on the tockwork_migrations table: which migration files each component has
-- applied, with their checksums (jobs/migrate.py).

-- name: tockwork_migration_lock
-- Serialise migrators: a transaction-scoped advisory lock under our own class id ('tock'), so
-- other applications' advisory locks never collide with it.
SELECT pg_advisory_xact_lock(%(lock_class)s, %(lock_id)s);

-- name: tockwork_migration_create_table
-- The bootstrap: the table that records the migrations, before any migration runs.
CREATE TABLE IF NOT EXISTS tockwork_migrations (
    component text NOT NULL,
    version integer NOT NULL,
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, version)
);

-- name: tockwork_migration_table_exists
SELECT to_regclass('tockwork_migrations') IS NOT NULL;

-- name: tockwork_migration_list
SELECT component, version, checksum FROM tockwork_migrations;

-- name: tockwork_migration_record
INSERT INTO tockwork_migrations (component, version, name, checksum)
VALUES (%(component)s, %(version)s, %(name)s, %(checksum)s);
