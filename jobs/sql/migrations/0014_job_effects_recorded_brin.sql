-- 0014: the retention index of effect records as a BRIN, like the other append-only histories
-- (job_attempts_finished_idx, jobs_finished_idx). Records are inserted with the time they are
-- recorded, so recorded_at follows the physical order and a block-range index answers
-- "recorded before T" (job_effect_delete_before); the B-tree it replaces took one entry per
-- record, about 65 bytes of WAL per delivered push (bench/reminder_delivery.py, issue 22).
DROP INDEX job_effects_recorded_idx;
CREATE INDEX job_effects_recorded_idx ON job_effects USING brin (recorded_at);
