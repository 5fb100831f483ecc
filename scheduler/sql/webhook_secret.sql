-- Named queries on the webhook_secrets table: the signing secrets of each endpoint. A secret
-- signs while its expires_at is unset or in the future.

-- name: webhook_secret_insert
INSERT INTO webhook_secrets (endpoint_id, secret, created_at)
VALUES (%(endpoint_id)s::bigint, %(secret)s::text, coalesce(%(now)s::timestamptz, now()))
RETURNING id;

-- name: webhook_secret_expire_others
-- A rotation: every other secret of the endpoint that still signs stops at the expires_at
-- parameter (the overlap's end), or sooner if it was to stop sooner.
UPDATE webhook_secrets
SET expires_at = least(coalesce(expires_at, %(expires_at)s::timestamptz),
                       %(expires_at)s::timestamptz)
WHERE endpoint_id = %(endpoint_id)s::bigint
  AND id <> %(keep)s::bigint
  AND (expires_at IS NULL OR expires_at > coalesce(%(now)s::timestamptz, now()))
RETURNING id;

-- name: webhook_secret_list
-- What an operator sees of an endpoint's secrets that still sign: when each was made and when
-- it stops, never the secret.
SELECT id, created_at, expires_at
FROM webhook_secrets
WHERE endpoint_id = %(endpoint_id)s::bigint
  AND (expires_at IS NULL OR expires_at > coalesce(%(now)s::timestamptz, now()))
ORDER BY id;
