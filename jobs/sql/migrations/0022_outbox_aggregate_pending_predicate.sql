-- 0022: the per-aggregate index of pending events says "pending" in its own words.

-- outbox_pending_idx (seq) and outbox_aggregate_pending_idx had the same predicate, so every
-- statement over pending events could take either. With statistics taken while every event was
-- processed (what a table that retention keeps mostly holds) both are estimated empty, reading
-- one whole looks free, and the planner served the relay's claim in seq order from the
-- per-aggregate index (read whole and sorted) and the per-aggregate probes from
-- outbox_pending_idx (read whole for each): 26-100 ms a claim at 5,000-10,000 pending events.
-- coalesce(processed_at, dead_at) IS NULL holds for the same rows; only the statements that
-- write it (the per-aggregate probes, jobs/sql/outbox_event.sql) can use this index, and they
-- no longer imply the other's predicate.
DROP INDEX IF EXISTS outbox_aggregate_pending_idx;

CREATE INDEX outbox_aggregate_pending_idx ON outbox_events (aggregate_type, aggregate_id, seq)
    WHERE coalesce(processed_at, dead_at) IS NULL;
