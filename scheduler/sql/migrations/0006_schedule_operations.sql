-- 0006: schedules as operators run them (issue 24): the overlap policy and its skip count, the
-- pause's note and end, the lifetime (start, end, run limit, finished), and the dashboard's
-- trigger and backfill actions.
ALTER TABLE schedules
    ADD COLUMN overlap text NOT NULL DEFAULT 'allow',
    ADD COLUMN overlap_skipped_count bigint NOT NULL DEFAULT 0,
    ADD COLUMN overlap_job_ids bigint[] NOT NULL DEFAULT '{}',
    ADD COLUMN pause_note text,
    ADD COLUMN paused_until timestamptz,
    ADD COLUMN start_at timestamptz,
    ADD COLUMN end_at timestamptz,
    ADD COLUMN max_runs integer,
    ADD COLUMN finished_at timestamptz,
    ADD CONSTRAINT schedules_overlap_check CHECK (
        overlap IN ('skip', 'buffer_one', 'allow', 'cancel_previous')
    ),
    ADD CONSTRAINT schedules_pause_note_check CHECK (length(pause_note) <= 500),
    ADD CONSTRAINT schedules_lifetime_check CHECK (end_at > start_at),
    ADD CONSTRAINT schedules_max_runs_check CHECK (max_runs >= 1);

-- A pause with an end is due (its next occurrence is the first after the end): the tick
-- picks it up and resumes it alone.
DROP INDEX schedules_due_idx;
CREATE INDEX schedules_due_idx ON schedules (next_run_at)
    WHERE (NOT paused OR paused_until IS NOT NULL) AND next_run_at IS NOT NULL;

-- Retention of finished schedules (one-off schedules are removed after a while).
CREATE INDEX schedules_finished_idx ON schedules (finished_at) WHERE finished_at IS NOT NULL;

ALTER TABLE schedule_skips DROP CONSTRAINT schedule_skips_kind_check;
ALTER TABLE schedule_skips ADD CONSTRAINT schedule_skips_kind_check CHECK (
    kind IN ('missed', 'skipped', 'superseded', 'overlap')
);

ALTER TABLE dashboard_audit DROP CONSTRAINT dashboard_audit_action_check;
ALTER TABLE dashboard_audit ADD CONSTRAINT dashboard_audit_action_check CHECK (
    action IN ('requeue', 'cancel', 'pause', 'resume', 'outbox_retry', 'webhook_disable',
               'webhook_enable', 'webhook_redeliver', 'trigger', 'backfill')
);
