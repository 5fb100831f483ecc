-- 0011: the webhook endpoints' rate limits, shared by every worker process (the first free
-- send slot of each limited endpoint; scheduler/sql/webhook_endpoint_rate.sql).
CREATE TABLE webhook_endpoint_rates (
    endpoint_id bigint PRIMARY KEY REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    next_at timestamptz NOT NULL
);
