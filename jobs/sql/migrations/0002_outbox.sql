-- 0002: outbox_events, the transactional outbox.

-- Durable facts recorded in the business transaction (jobs.outbox.record) and projected into jobs
-- by the relay (jobs.relay). A row is pending (processed_at and dead_at NULL), processed, or dead
-- (set aside after its projections failed max_attempts times; kept until a person acts).
-- aggregate_id is text, not uuid: aggregates keyed by integers or natural keys are common, and
-- the relay only compares it for equality.
CREATE TABLE outbox_events (
    id uuid PRIMARY KEY,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    organization_id uuid,
    aggregate_type text NOT NULL,
    aggregate_id text NOT NULL,
    event_type text NOT NULL,
    schema_version integer NOT NULL DEFAULT 1,
    payload jsonb NOT NULL,
    occurred_at timestamptz NOT NULL,
    available_at timestamptz NOT NULL DEFAULT now(),
    claimed_at timestamptz,
    claimed_by text,
    processed_at timestamptz,
    dead_at timestamptz,
    attempts integer NOT NULL DEFAULT 0,
    last_error text,
    CONSTRAINT outbox_events_aggregate_type_check CHECK (length(aggregate_type) BETWEEN 1 AND 200),
    CONSTRAINT outbox_events_aggregate_id_check CHECK (length(aggregate_id) BETWEEN 1 AND 200),
    CONSTRAINT outbox_events_event_type_check CHECK (length(event_type) BETWEEN 1 AND 200),
    CONSTRAINT outbox_events_schema_version_check CHECK (schema_version >= 1),
    CONSTRAINT outbox_events_attempts_check CHECK (attempts >= 0),
    CONSTRAINT outbox_events_last_error_check CHECK (octet_length(last_error) <= 1024),
    CONSTRAINT outbox_events_state_check CHECK (processed_at IS NULL OR dead_at IS NULL)
) WITH (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

-- Pending events in claim order (occurred_at, seq), so a claim's LIMIT stops early. Only pending
-- rows are indexed: the index stays small however many processed events retention keeps.
CREATE INDEX outbox_pending_idx ON outbox_events (occurred_at, seq)
    WHERE processed_at IS NULL AND dead_at IS NULL;

-- "Is an earlier event of this aggregate still pending?": the per-aggregate ordering check.
CREATE INDEX outbox_aggregate_pending_idx
    ON outbox_events (aggregate_type, aggregate_id, occurred_at, seq)
    WHERE processed_at IS NULL AND dead_at IS NULL;

-- Dead events for inspection and retry.
CREATE INDEX outbox_dead_idx ON outbox_events (dead_at) WHERE dead_at IS NOT NULL;

-- Retention of processed events ("processed before T"): rows are processed roughly in insert
-- order, so a block-range index is enough and nearly free to maintain.
CREATE INDEX outbox_processed_idx ON outbox_events USING brin (processed_at)
    WHERE processed_at IS NOT NULL;
