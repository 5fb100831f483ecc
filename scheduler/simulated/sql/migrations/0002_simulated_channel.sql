-- 0002: the simulated push channel (scheduler.simulated.SimulatedChannel) records one row per
-- device notified: the token and the title beside the body; a channel knows no job or attempt.
ALTER TABLE simulated_pushes
    ALTER COLUMN job_id DROP NOT NULL,
    ALTER COLUMN attempt DROP NOT NULL,
    ADD COLUMN IF NOT EXISTS token text,
    ADD COLUMN IF NOT EXISTS title text;
