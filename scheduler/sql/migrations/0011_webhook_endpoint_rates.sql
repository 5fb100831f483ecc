-- 0011: the webhook endpoints' rate limits, shared by every worker process (the first free
-- send slot of each limited endpoint; scheduler/sql/webhook_endpoint_rate.sql), and the index
-- of the deliveries held while their endpoint is disabled (released at enable; the
-- tockwork_webhook_deliveries_held gauge).
CREATE TABLE webhook_endpoint_rates (
    endpoint_id bigint PRIMARY KEY REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    next_at timestamptz NOT NULL
);
CREATE INDEX webhook_attempts_held_idx ON webhook_attempts (endpoint_id) WHERE outcome = 'held';
