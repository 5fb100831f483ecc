-- Named queries on the webhook_attempts table: what each delivery attempt got, and the
-- deliveries held back while their endpoint was disabled (outcome held, then released).

-- name: webhook_attempt_insert
-- A batch of attempts: the attempts parameter is a JSON array of objects, one per attempt,
-- keyed by column (scheduler/webhooks/delivery.py, _attempt_rows).
INSERT INTO webhook_attempts (endpoint_id, event_id, job_id, attempt, attempted_at, outcome,
                              status, duration_ms, error, response)
SELECT u.endpoint_id, u.event_id, u.job_id, u.attempt, coalesce(%(now)s::timestamptz, now()),
       u.outcome, u.status, u.duration_ms, u.error, u.response
FROM json_to_recordset(%(attempts)s::json)
     AS u(endpoint_id bigint, event_id uuid, job_id bigint, attempt integer, outcome text,
          status integer, duration_ms double precision, error text, response text)
WHERE EXISTS (SELECT FROM webhook_endpoints AS e WHERE e.id = u.endpoint_id);

-- name: webhook_attempt_recent
SELECT id, endpoint_id, event_id, job_id, attempt, attempted_at, outcome, status, duration_ms,
       error, response
FROM webhook_attempts
WHERE endpoint_id = %(endpoint_id)s::bigint
ORDER BY attempted_at DESC, id DESC
LIMIT %(limit)s;

-- name: webhook_attempt_release_held
-- An endpoint enabled again: its held deliveries are released (their jobs are requeued).
UPDATE webhook_attempts
SET outcome = 'released'
WHERE endpoint_id = %(endpoint_id)s::bigint AND outcome = 'held'
RETURNING job_id;

-- name: webhook_attempt_failed_jobs
-- The delivery jobs of an endpoint with an attempt that failed (or was held) at or after the
-- since parameter: what "redeliver every failed delivery since" requeues.
SELECT DISTINCT job_id
FROM webhook_attempts
WHERE endpoint_id = %(endpoint_id)s::bigint
  AND attempted_at >= %(since)s::timestamptz
  AND outcome IN ('failed', 'held')
ORDER BY job_id;

-- name: webhook_attempt_event_jobs
-- The delivery jobs of one event (to one endpoint, or to each), newest first per endpoint.
SELECT DISTINCT ON (endpoint_id) endpoint_id, job_id
FROM webhook_attempts
WHERE event_id = %(event_id)s::uuid
  AND (%(endpoint_id)s::bigint IS NULL OR endpoint_id = %(endpoint_id)s::bigint)
ORDER BY endpoint_id, id DESC;

-- name: webhook_attempt_delete_before
-- Retention (scheduler/maintenance.py): one bounded batch of attempts made before the before
-- parameter. A held attempt is kept while it is held (enabling the endpoint requeues its job).
WITH doomed AS (
    SELECT id FROM webhook_attempts
    WHERE attempted_at < %(before)s AND outcome <> 'held'
    LIMIT %(limit)s
)
DELETE FROM webhook_attempts WHERE id IN (SELECT id FROM doomed);
