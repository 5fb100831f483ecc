-- 0012: attempts per minute, rolled up off the completion path (docs/dashboard.md, "Fast on big
-- tables"): the dashboard's chart of the last hour reads 60 rows instead of every attempt.

-- One row per closed minute (UTC), written by the built-in maintenance (jobs.maintenance.
-- rollup_attempts, definition tockwork.attempt_rollup) from the attempts of that minute, never
-- by a completion: no counter row for workers to contend on. A minute's row exists once it was
-- rolled up, even with no attempts ('{}'), so a reader tells "none" from "not rolled up yet".
-- outcomes: {outcome: attempts}; attempts: their sum. rolled_at: when the row was computed.
CREATE TABLE job_attempt_minutes (
    minute timestamptz PRIMARY KEY,
    attempts bigint NOT NULL,
    outcomes jsonb NOT NULL,
    rolled_at timestamptz NOT NULL,
    CONSTRAINT job_attempt_minutes_attempts_check CHECK (attempts >= 0)
);
