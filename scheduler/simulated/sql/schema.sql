-- The simulated push provider (scheduler/simulated): one row per delivery, keyed by the effect
-- key of the job, so a retried job never notifies twice. An opt-in component: see
-- scheduler/simulated/__init__.py.
CREATE TABLE simulated_pushes (
    effect_key text PRIMARY KEY,
    job_id bigint,
    schedule_id bigint,
    occurrence_key text,
    occurrence_at timestamptz,
    subject text,
    message text,
    attempt integer,
    delivered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- The simulated channel's rows (0002): the device token and the title.
    token text,
    title text
);
