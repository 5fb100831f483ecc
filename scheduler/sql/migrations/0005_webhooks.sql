-- 0005: outbound webhooks (scheduler.webhooks): endpoints, their signing secrets, attempts.
CREATE TABLE webhook_endpoints (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    organization_id uuid,
    url text NOT NULL,
    description text,
    event_types text[],
    rate_limit integer,
    enabled boolean NOT NULL DEFAULT true,
    disabled_at timestamptz,
    disabled_reason text,
    consecutive_failures integer NOT NULL DEFAULT 0,
    failing_since timestamptz,
    last_success_at timestamptz,
    last_failure_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhook_endpoints_url_check CHECK (length(url) BETWEEN 1 AND 2048),
    CONSTRAINT webhook_endpoints_description_check CHECK (length(description) <= 500),
    CONSTRAINT webhook_endpoints_event_types_check CHECK (cardinality(event_types) BETWEEN 1 AND 100),
    CONSTRAINT webhook_endpoints_rate_limit_check CHECK (rate_limit BETWEEN 1 AND 100000),
    CONSTRAINT webhook_endpoints_disabled_check CHECK (
        enabled = (disabled_at IS NULL) AND (disabled_reason IS NULL OR disabled_at IS NOT NULL)
    )
);

-- The fan-out read: the enabled endpoints of one organization (none counts as one).
CREATE INDEX webhook_endpoints_organization_idx ON webhook_endpoints (organization_id)
    WHERE enabled;

-- The signing secrets of each endpoint: every secret whose expires_at is unset or in the future
-- signs each request (one webhook-signature entry each), so a rotation keeps the old secret
-- valid for an overlap while receivers switch. The secret is stored as given to the receiver
-- (whsec_ and base64): signing needs it, so it is a credential of this table's readers.
CREATE TABLE webhook_secrets (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id bigint NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    secret text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    CONSTRAINT webhook_secrets_secret_check CHECK (secret ~ '^whsec_[A-Za-z0-9+/]+={0,2}$')
);
CREATE INDEX webhook_secrets_endpoint_idx ON webhook_secrets (endpoint_id);

-- Every delivery attempt (and every delivery held back while its endpoint was disabled): the
-- response's status, how long it took, a bounded summary of the response or the error. The
-- job_id is the delivery job's (jobs.jobs), kept without a foreign key: the queue's retention
-- deletes finished jobs on its own schedule.
CREATE TABLE webhook_attempts (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id bigint NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id uuid NOT NULL,
    job_id bigint NOT NULL,
    attempt integer NOT NULL,
    attempted_at timestamptz NOT NULL,
    outcome text NOT NULL,
    status integer,
    duration_ms double precision,
    error text,
    response text,
    CONSTRAINT webhook_attempts_outcome_check CHECK (
        outcome IN ('delivered', 'failed', 'held', 'released')
    ),
    CONSTRAINT webhook_attempts_error_check CHECK (length(error) <= 1000),
    CONSTRAINT webhook_attempts_response_check CHECK (length(response) <= 1000)
);
CREATE INDEX webhook_attempts_endpoint_idx ON webhook_attempts (endpoint_id, attempted_at);
CREATE INDEX webhook_attempts_event_idx ON webhook_attempts (event_id);

-- The dashboard's webhook actions are audited like its others.
ALTER TABLE dashboard_audit DROP CONSTRAINT dashboard_audit_action_check;
ALTER TABLE dashboard_audit ADD CONSTRAINT dashboard_audit_action_check CHECK (
    action IN ('requeue', 'cancel', 'pause', 'resume', 'outbox_retry', 'webhook_disable',
               'webhook_enable', 'webhook_redeliver')
);
