-- 0020: attempt history and effect records are partitioned by day (UTC), so that retention
-- drops a whole day instead of deleting it row by row (docs/scaling.md, "History in time
-- partitions"). Online and without copying: the existing table becomes the DEFAULT partition of
-- the new partitioned table (renames and catalog changes only; attaching a default partition
-- while no other partition exists reads no row). New days get partitions of their own from the
-- built-in maintenance (jobs.partitions.ensure_partitions); the converted rows stay in the
-- default partition, which retention empties by bounded deletes as before.
--
-- Indexes a partition needs are matched to the existing ones, never built here, when they
-- exist: jobs.partitions.prepare() creates the two that the old tables lack (job_attempts (id)
-- and job_effects (effect_key, recorded_on)) with CREATE INDEX CONCURRENTLY before this
-- migration. Without it this migration builds them inside its transaction (a few seconds per
-- million rows), which is fine for a small database.
--
-- An empty table (a new database) is dropped and created as a partition, so that a migrated
-- database equals schema.sql exactly.

-- ---------------------------------------------------------------------------------------------
-- job_attempts: partitioned by finished_at. No primary key (one would have to include
-- finished_at, and nothing refers to an attempt by id); the id comes from a sequence (identity
-- columns on partitioned tables need PostgreSQL 17) and keeps its index, which the dashboard's
-- newest-first scan reads.

-- The CHECK constraints are copied from the table being converted (an earlier migration may have
-- widened one), before the table is dropped or renamed; the parent gets them while it has no
-- partition (nothing to check), and the old table, attached, already has them.
CREATE TEMPORARY TABLE tockwork_checks AS
SELECT 'job_attempts' AS parent, conname, pg_get_constraintdef(oid) AS def
FROM pg_constraint WHERE conrelid = 'job_attempts'::regclass AND contype = 'c'
UNION ALL
SELECT 'job_effects', conname, pg_get_constraintdef(oid)
FROM pg_constraint WHERE conrelid = 'job_effects'::regclass AND contype = 'c';

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM job_attempts) THEN
        DROP TABLE job_attempts;
    ELSE
        ALTER TABLE job_attempts RENAME TO job_attempts_default;
        ALTER TABLE job_attempts_default ALTER COLUMN id DROP IDENTITY;
        ALTER TABLE job_attempts_default RENAME CONSTRAINT job_attempts_pkey
            TO job_attempts_default_pkey;
        ALTER INDEX job_attempts_job_idx RENAME TO job_attempts_default_job_id_attempt_idx;
        ALTER INDEX job_attempts_finished_idx RENAME TO job_attempts_default_finished_at_idx;
        IF to_regclass('job_attempts_default_id_idx') IS NULL THEN
            CREATE INDEX job_attempts_default_id_idx ON job_attempts_default (id);
        END IF;
    END IF;
END
$$;

CREATE SEQUENCE job_attempts_id_seq AS bigint;

CREATE TABLE job_attempts (
    id bigint NOT NULL DEFAULT nextval('job_attempts_id_seq'),
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    queue text NOT NULL,
    job_type text NOT NULL,
    worker text,
    started_at timestamptz,
    finished_at timestamptz NOT NULL,
    outcome text NOT NULL,
    error_code text,
    error_summary text,
    duration_ms double precision
) PARTITION BY RANGE (finished_at);

ALTER SEQUENCE job_attempts_id_seq OWNED BY job_attempts.id;

CREATE INDEX job_attempts_job_idx ON job_attempts (job_id, attempt);
CREATE INDEX job_attempts_finished_idx ON job_attempts USING brin (finished_at);
CREATE INDEX job_attempts_id_idx ON job_attempts (id);

DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT * FROM tockwork_checks WHERE parent = 'job_attempts' ORDER BY conname LOOP
        EXECUTE format('ALTER TABLE job_attempts ADD CONSTRAINT %I %s', c.conname, c.def);
    END LOOP;
    IF to_regclass('job_attempts_default') IS NULL THEN
        CREATE TABLE job_attempts_default PARTITION OF job_attempts DEFAULT
            WITH (autovacuum_vacuum_insert_scale_factor = 0.05);
    ELSE
        ALTER TABLE job_attempts ATTACH PARTITION job_attempts_default DEFAULT;
        PERFORM setval('job_attempts_id_seq', max(id)) FROM job_attempts_default;
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- job_effects: partitioned by recorded_on, the UTC day of recorded_at, written by the record
-- statements (a partition key cannot be a generated column). The key is unique per day
-- ((effect_key, recorded_on)); the record statements make it unique across days: they insert
-- only a key found in no partition, and a record within an hour of midnight also writes a guard
-- row in the next day, on which a concurrent record of the same key on the other side of
-- midnight conflicts (jobs/sql/job_effect.sql).

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM job_effects) THEN
        DROP TABLE job_effects;
    ELSE
        ALTER TABLE job_effects RENAME TO job_effects_default;
        -- A constant default for the rows already there (no rewrite): the day of the migration.
        ALTER TABLE job_effects_default
            ADD COLUMN IF NOT EXISTS recorded_on date NOT NULL
            DEFAULT ((now() AT TIME ZONE 'UTC')::date);
        ALTER TABLE job_effects_default ALTER COLUMN recorded_on DROP DEFAULT;
        ALTER TABLE job_effects_default DROP CONSTRAINT job_effects_pkey;
        ALTER INDEX job_effects_recorded_idx RENAME TO job_effects_default_recorded_at_idx;
        IF to_regclass('job_effects_default_pkey') IS NULL THEN
            CREATE UNIQUE INDEX job_effects_default_pkey
                ON job_effects_default (effect_key, recorded_on);
        END IF;
        -- The parent's primary key matches a partition's index only if a constraint backs it.
        ALTER TABLE job_effects_default
            ADD CONSTRAINT job_effects_default_pkey PRIMARY KEY USING INDEX job_effects_default_pkey;
    END IF;
END
$$;

CREATE TABLE job_effects (
    effect_key text NOT NULL,
    job_id bigint,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    detail jsonb,
    recorded_on date NOT NULL DEFAULT ((now() AT TIME ZONE 'UTC')::date),
    CONSTRAINT job_effects_pkey PRIMARY KEY (effect_key, recorded_on)
) PARTITION BY RANGE (recorded_on);

CREATE INDEX job_effects_recorded_idx ON job_effects USING brin (recorded_at);

DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT * FROM tockwork_checks WHERE parent = 'job_effects' ORDER BY conname LOOP
        EXECUTE format('ALTER TABLE job_effects ADD CONSTRAINT %I %s', c.conname, c.def);
    END LOOP;
    IF to_regclass('job_effects_default') IS NULL THEN
        CREATE TABLE job_effects_default PARTITION OF job_effects DEFAULT;
    ELSE
        ALTER TABLE job_effects ATTACH PARTITION job_effects_default DEFAULT;
    END IF;
END
$$;

-- All migrations run in one transaction: the next one may need the name.
DROP TABLE tockwork_checks;
