-- 0003: the operator dashboard's audit trail (scheduler.dashboard): every action taken from it.
CREATE TABLE dashboard_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    actor text NOT NULL,
    action text NOT NULL,
    filter jsonb NOT NULL,
    affected integer NOT NULL,
    CONSTRAINT dashboard_audit_actor_check CHECK (length(actor) BETWEEN 1 AND 200),
    CONSTRAINT dashboard_audit_action_check CHECK (
        action IN ('requeue', 'cancel', 'pause', 'resume', 'outbox_retry')
    ),
    CONSTRAINT dashboard_audit_affected_check CHECK (affected >= 0)
);

CREATE INDEX dashboard_audit_at_idx ON dashboard_audit (at);
