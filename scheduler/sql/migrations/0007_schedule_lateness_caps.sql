-- 0007: expiry of late reminders and per-subject caps (issue 24).
-- max_lateness_seconds: how late a schedule's jobs may start (jobs.expires_at = run_at + it;
-- a job claimed later ends 'expired' unrun). NULL: no limit (named definitions by default);
-- reminders get an hour unless they say otherwise (scheduler/spec.py).
ALTER TABLE schedules ADD COLUMN max_lateness_seconds integer;
ALTER TABLE schedules ADD CONSTRAINT schedules_max_lateness_check
    CHECK (max_lateness_seconds > 0) NOT VALID;
ALTER TABLE schedules VALIDATE CONSTRAINT schedules_max_lateness_check;

-- Two kinds of skip: 'expired' (the job was not started within the schedule's max_lateness)
-- and 'capped' (the subject had its cap of deliveries in the window already).
ALTER TABLE schedule_skips DROP CONSTRAINT schedule_skips_kind_check;
ALTER TABLE schedule_skips ADD CONSTRAINT schedule_skips_kind_check
    CHECK (kind IN ('missed', 'skipped', 'superseded', 'overlap', 'expired',
                   'capped')) NOT VALID;
ALTER TABLE schedule_skips VALIDATE CONSTRAINT schedule_skips_kind_check;

-- Per-subject caps of reminders (scheduler.delivery.SubjectCap): the deliveries each subject
-- was admitted in its cap's last window, as (job id, instant) pairs in two parallel arrays,
-- pruned at every admission (as job_rate_limits keeps its last second). The row is also the
-- subject's mutex: an admission locks it, so concurrent workers never admit past the cap.
CREATE TABLE subject_deliveries (
    organization_id uuid NOT NULL,
    subject text NOT NULL,
    recent_job_ids bigint[] NOT NULL DEFAULT '{}',
    recent_at timestamptz[] NOT NULL DEFAULT '{}',
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (organization_id, subject),
    CONSTRAINT subject_deliveries_subject_check CHECK (length(subject) BETWEEN 1 AND 200)
);
