-- Named queries on the webhook_endpoints table (scheduler/webhooks/endpoints.py and the delivery
-- handler). Every time predicate takes the now parameter and falls back to the database clock.
-- An endpoint is enabled while disabled_at is NULL (a CHECK keeps the two in step).

-- fragment: webhook_endpoint_columns
-- An endpoint's columns in the order scheduler/webhooks/endpoints.py's Endpoint reads them.
id, organization_id, url, description, event_types, rate_limit, enabled, disabled_at,
disabled_reason, consecutive_failures, failing_since, last_success_at, last_failure_at,
created_at, updated_at

-- name: webhook_endpoint_insert
INSERT INTO webhook_endpoints (organization_id, url, description, event_types, rate_limit,
                               created_at, updated_at)
VALUES (%(organization_id)s::uuid, %(url)s::text, %(description)s::text,
        %(event_types)s::text[], %(rate_limit)s::integer, coalesce(%(now)s::timestamptz, now()),
        coalesce(%(now)s::timestamptz, now()))
RETURNING {{webhook_endpoint_columns}};

-- name: webhook_endpoint_get
SELECT {{webhook_endpoint_columns}}
FROM webhook_endpoints
WHERE id = %(id)s::bigint;

-- name: webhook_endpoint_delete
DELETE FROM webhook_endpoints WHERE id = %(id)s::bigint RETURNING id;

-- name: webhook_endpoint_list
-- Endpoints in id order after the keyset cursor (the after parameter), each filter optional.
-- The organization filter has a flag of its own because a NULL organization_id is a value.
SELECT {{webhook_endpoint_columns}}
FROM webhook_endpoints
WHERE id > %(after)s::bigint
  AND (NOT %(by_organization)s::bool
       OR organization_id IS NOT DISTINCT FROM %(organization_id)s::uuid)
  AND (%(include_disabled)s::bool OR enabled)
ORDER BY id
LIMIT %(limit)s;

-- name: webhook_endpoint_disable
-- Disable an enabled endpoint with its reason; no row when it was disabled already (or gone).
UPDATE webhook_endpoints
SET enabled = false,
    disabled_at = coalesce(%(now)s::timestamptz, now()),
    disabled_reason = %(reason)s::text,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s::bigint AND enabled
RETURNING {{webhook_endpoint_columns}};

-- name: webhook_endpoint_enable
-- Enable an endpoint again: its failure streak starts over. Returns the row either way (an
-- enabled endpoint is left as it is).
UPDATE webhook_endpoints
SET enabled = true,
    disabled_at = NULL,
    disabled_reason = NULL,
    consecutive_failures = CASE WHEN enabled THEN consecutive_failures ELSE 0 END,
    failing_since = CASE WHEN enabled THEN failing_since END,
    updated_at = CASE WHEN enabled THEN updated_at ELSE coalesce(%(now)s::timestamptz, now()) END
WHERE id = %(id)s::bigint
RETURNING {{webhook_endpoint_columns}};

-- name: webhook_endpoint_subscribed
-- The fan-out read: the enabled endpoints of one organization and their event-type filters.
SELECT id, event_types
FROM webhook_endpoints
WHERE organization_id IS NOT DISTINCT FROM %(organization_id)s::uuid AND enabled
ORDER BY id;

-- name: webhook_endpoint_for_delivery
-- The delivery read of a batch: each endpoint's URL, state and rate limit, and the secrets
-- that sign its requests now (newest first).
SELECT e.id, e.url, e.enabled, e.rate_limit,
       coalesce(array(SELECT s.secret FROM webhook_secrets AS s
                      WHERE s.endpoint_id = e.id
                        AND (s.expires_at IS NULL
                             OR s.expires_at > coalesce(%(now)s::timestamptz, now()))
                      ORDER BY s.id DESC), '{}')
FROM webhook_endpoints AS e
WHERE e.id = ANY(%(ids)b::bigint[]);

-- name: webhook_endpoint_record_health
-- A batch's results on its endpoints, one row of the arrays per endpoint: whether any delivery
-- succeeded, how many failed after the last success (or in all, without one), and whether one
-- answered 410 Gone. A success ends the failure streak; failures extend it (failing_since is
-- the first failure of the streak). An enabled endpoint is disabled here, in the same
-- statement, when it answered 410 or its streak reached the threshold parameter of failures
-- spanning at least the period parameter. Returns the endpoints this statement disabled, for
-- their endpoint.disabled facts. Rows are locked in id order (no deadlock between batches).
-- A batch that only succeeded, on an endpoint with no failure streak whose last_success_at is
-- younger than the success_every parameter, changes nothing but that instant: the row is
-- neither locked nor written (last_success_at is written at most once every success_every
-- while an endpoint is healthy; otherwise every batch of a busy endpoint rewrote its row). The
-- lock re-reads that condition on the row's newest version (a failure recorded meanwhile by
-- another worker is seen, and reset here).
WITH locked AS MATERIALIZED (
    SELECT e.id
    FROM webhook_endpoints AS e
    JOIN unnest(%(ids)b::bigint[], %(succeeded)b::bool[], %(failures)b::integer[],
                %(gone)b::bool[]) AS u(id, succeeded, failures, gone) ON u.id = e.id
    WHERE NOT (u.succeeded AND u.failures = 0 AND NOT u.gone
               AND e.consecutive_failures = 0 AND e.failing_since IS NULL
               AND coalesce(e.last_success_at
                            > coalesce(%(now)s::timestamptz, now()) - %(success_every)s::interval,
                            false))
    ORDER BY e.id
    FOR NO KEY UPDATE OF e
),
computed AS (
    SELECT e.id, e.enabled AS was_enabled, u.succeeded, u.failures, u.gone,
           CASE WHEN u.succeeded THEN u.failures
                ELSE e.consecutive_failures + u.failures END AS streak,
           CASE WHEN u.succeeded AND u.failures = 0 THEN NULL
                WHEN u.succeeded THEN coalesce(%(now)s::timestamptz, now())
                WHEN u.failures = 0 THEN e.failing_since
                WHEN e.failing_since IS NULL THEN coalesce(%(now)s::timestamptz, now())
                ELSE e.failing_since END AS since
    FROM locked
    JOIN webhook_endpoints AS e ON e.id = locked.id
    JOIN unnest(%(ids)b::bigint[], %(succeeded)b::bool[], %(failures)b::integer[],
                %(gone)b::bool[]) AS u(id, succeeded, failures, gone) ON u.id = e.id
),
decided AS (
    SELECT c.*,
           c.was_enabled AND (
               c.gone
               OR (c.streak >= %(threshold)s::integer
                   AND coalesce(%(now)s::timestamptz, now()) - c.since >= %(period)s::interval)
           ) AS disable
    FROM computed AS c
)
UPDATE webhook_endpoints AS e
SET consecutive_failures = d.streak,
    failing_since = d.since,
    last_success_at = CASE WHEN d.succeeded THEN coalesce(%(now)s::timestamptz, now())
                           ELSE e.last_success_at END,
    last_failure_at = CASE WHEN d.failures > 0 THEN coalesce(%(now)s::timestamptz, now())
                           ELSE e.last_failure_at END,
    enabled = e.enabled AND NOT d.disable,
    disabled_at = CASE WHEN d.disable THEN coalesce(%(now)s::timestamptz, now())
                       ELSE e.disabled_at END,
    disabled_reason = CASE
        WHEN NOT d.disable THEN e.disabled_reason
        WHEN d.gone THEN 'the endpoint answered 410 Gone'
        ELSE d.streak || ' consecutive failed deliveries since ' || d.since::text
    END,
    updated_at = CASE WHEN d.disable THEN coalesce(%(now)s::timestamptz, now())
                      ELSE e.updated_at END
FROM decided AS d
WHERE e.id = d.id
RETURNING e.id, e.organization_id, e.url, e.disabled_reason, e.disabled_at, d.disable;

-- name: webhook_endpoint_table_exists
-- The webhook probe of /metrics: a database without the scheduler's migrations has no gauges.
SELECT to_regclass('webhook_endpoints') IS NOT NULL;

-- name: webhook_endpoint_gauges
-- The scrape-time gauges (scheduler/webhooks/metrics.py): endpoints enabled and disabled, and
-- the deliveries held while their endpoint is disabled, counted up to the limit parameter on
-- the partial index of held attempts (a held delivery has one held attempt until released).
SELECT count(*) FILTER (WHERE enabled),
       count(*) FILTER (WHERE NOT enabled),
       (SELECT count(*)
        FROM (SELECT 1 FROM webhook_attempts WHERE outcome = 'held' LIMIT %(limit)s) AS h)
FROM webhook_endpoints;

-- name: webhook_endpoint_set_rate_limit
-- Change an endpoint's rate limit (NULL lifts it). Deliveries read it at their next reservation
-- (webhook_endpoint_rate_reserve): the slots already reserved stand.
UPDATE webhook_endpoints
SET rate_limit = %(rate_limit)s::integer,
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(id)s::bigint
RETURNING {{webhook_endpoint_columns}};
