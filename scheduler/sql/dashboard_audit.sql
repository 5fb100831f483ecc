-- The dashboard's audit trail (scheduler.dashboard): one row per action taken from it.

-- name: dashboard_audit_insert
INSERT INTO dashboard_audit (at, actor, action, filter, affected)
VALUES (coalesce(%(now)s::timestamptz, now()), %(actor)s, %(action)s, %(filter)s::jsonb,
        %(affected)s)
RETURNING id;

-- name: dashboard_audit_recent
SELECT id, at, actor, action, filter, affected
FROM dashboard_audit
ORDER BY id DESC
LIMIT %(limit)s;
