-- 0009: schedule skips are partitioned by day (UTC) of recorded_at, so that retention drops a
-- whole day instead of deleting it row by row (jobs migration 0020 does the same for attempts
-- and effect records; docs/scaling.md, "History in time partitions"). Online and without
-- copying: the existing table becomes the DEFAULT partition (renames and catalog changes only);
-- its indexes are matched, none is built. The built-in maintenance creates the days ahead
-- (schedule_skips_pYYYYMMDD); retention empties the default partition by bounded deletes.
-- An empty table (a new database) is dropped and created as a partition, so that a migrated
-- database equals schema.sql exactly. No primary key (it would have to include recorded_at);
-- the id comes from a sequence (identity columns of partitioned tables need PostgreSQL 17).

-- The CHECK constraints are copied from the table being converted (an earlier migration may have
-- widened the kinds); the parent gets them while it has no partition.
CREATE TEMPORARY TABLE tockwork_checks AS
SELECT conname, pg_get_constraintdef(oid) AS def
FROM pg_constraint WHERE conrelid = 'schedule_skips'::regclass AND contype = 'c';

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM schedule_skips) THEN
        DROP TABLE schedule_skips;
    ELSE
        ALTER TABLE schedule_skips RENAME TO schedule_skips_default;
        ALTER TABLE schedule_skips_default ALTER COLUMN id DROP IDENTITY;
        ALTER TABLE schedule_skips_default RENAME CONSTRAINT schedule_skips_pkey
            TO schedule_skips_default_pkey;
        ALTER INDEX schedule_skips_schedule_idx
            RENAME TO schedule_skips_default_schedule_id_occurrence_at_idx;
        ALTER INDEX schedule_skips_recorded_idx RENAME TO schedule_skips_default_recorded_at_idx;
    END IF;
END
$$;

CREATE SEQUENCE schedule_skips_id_seq AS bigint;

CREATE TABLE schedule_skips (
    id bigint NOT NULL DEFAULT nextval('schedule_skips_id_seq'),
    schedule_id bigint NOT NULL,
    occurrence_key text NOT NULL,
    occurrence_at timestamptz NOT NULL,
    kind text NOT NULL,
    reason text,
    recorded_at timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (recorded_at);

ALTER SEQUENCE schedule_skips_id_seq OWNED BY schedule_skips.id;

CREATE INDEX schedule_skips_schedule_idx ON schedule_skips (schedule_id, occurrence_at);
CREATE INDEX schedule_skips_recorded_idx ON schedule_skips (recorded_at);

DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT * FROM tockwork_checks ORDER BY conname LOOP
        EXECUTE format('ALTER TABLE schedule_skips ADD CONSTRAINT %I %s', c.conname, c.def);
    END LOOP;
    IF to_regclass('schedule_skips_default') IS NULL THEN
        CREATE TABLE schedule_skips_default PARTITION OF schedule_skips DEFAULT;
    ELSE
        ALTER TABLE schedule_skips ATTACH PARTITION schedule_skips_default DEFAULT;
        PERFORM setval('schedule_skips_id_seq', max(id)) FROM schedule_skips_default;
    END IF;
END
$$;

-- All migrations run in one transaction: the next one may need the name.
DROP TABLE tockwork_checks;
