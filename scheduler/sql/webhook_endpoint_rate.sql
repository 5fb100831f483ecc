-- Named queries on the webhook_endpoint_rates table: the rate limit of each endpoint, shared by
-- every worker process (scheduler/webhooks/delivery.py, WebhookHandler._reserve).
--
-- A limit of r deliveries a second is a schedule of send slots 1/r seconds apart (the generic
-- cell rate algorithm): next_at is the first slot no delivery holds. A delivery reserves one
-- slot in one statement, then waits in its process until the slot (at most the horizon
-- parameter, a second by default) and sends; a delivery whose slot would be farther reserves
-- nothing and is snoozed. So the sends of all processes together are 1/r seconds apart: no
-- second sees more than r of them (plus one at its edge), and an idle endpoint saves up no
-- burst.

-- name: webhook_endpoint_rate_reserve
-- Reserve the next send slot of one endpoint (the id parameter): next_at, or now if that is
-- past, when it is at most the horizon parameter ahead; next_at then moves one step past it.
-- The row is locked first and the time read after the lock (a reservation that waited for
-- another one's commit must not date itself at its start). Returns the seconds from now to the
-- slot, whether it was reserved, and the slot; no row when the endpoint has no rate limit (any
-- more) or no row here yet (webhook_endpoint_rate_ensure).
WITH locked AS MATERIALIZED (
    SELECT r.endpoint_id, r.next_at, e.rate_limit
    FROM webhook_endpoint_rates AS r
    JOIN webhook_endpoints AS e ON e.id = r.endpoint_id
    WHERE r.endpoint_id = %(id)s::bigint AND e.rate_limit IS NOT NULL
    FOR NO KEY UPDATE OF r
),
slot AS MATERIALIZED (
    SELECT l.endpoint_id, t.as_of, greatest(l.next_at, t.as_of) AS send_at,
           make_interval(secs => 1.0::float8 / l.rate_limit) AS step
    FROM locked AS l,
         LATERAL (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS as_of) AS t
),
reserved AS (
    UPDATE webhook_endpoint_rates AS r
    SET next_at = s.send_at + s.step
    FROM slot AS s
    WHERE r.endpoint_id = s.endpoint_id
      AND s.send_at <= s.as_of + %(horizon)s::interval
    RETURNING r.endpoint_id
)
SELECT extract(epoch FROM s.send_at - s.as_of)::float8, EXISTS (SELECT 1 FROM reserved),
       s.send_at
FROM slot AS s;

-- name: webhook_endpoint_rate_ensure
-- The rate row of an endpoint, made at its first limited delivery (a row per endpoint that has
-- ever been limited; it goes with the endpoint).
INSERT INTO webhook_endpoint_rates (endpoint_id, next_at)
SELECT id, '-infinity'::timestamptz FROM webhook_endpoints WHERE id = %(id)s::bigint
ON CONFLICT (endpoint_id) DO NOTHING;
