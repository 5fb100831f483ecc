-- 0001: the simulated push provider's table. Databases migrated before this component existed
-- got the table from scheduler/0001; when it still held rows, scheduler/0002 kept it and this
-- migration adopts it as it is.
CREATE TABLE IF NOT EXISTS simulated_pushes (
    effect_key text PRIMARY KEY,
    job_id bigint NOT NULL,
    schedule_id bigint,
    occurrence_key text,
    occurrence_at timestamptz,
    subject text,
    message text,
    attempt integer NOT NULL,
    delivered_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
