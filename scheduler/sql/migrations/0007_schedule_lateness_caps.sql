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
    CHECK (kind IN ('missed', 'skipped', 'superseded', 'expired', 'capped')) NOT VALID;
ALTER TABLE schedule_skips VALIDATE CONSTRAINT schedule_skips_kind_check;
