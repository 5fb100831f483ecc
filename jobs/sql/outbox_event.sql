-- Named queries on the outbox_events table: the transactional outbox (jobs/outbox.py,
-- jobs/relay.py), its gauges (jobs/metrics.py) and its retention (jobs/maintenance.py).
-- Every time predicate takes %(now)s and falls back to the database clock.
-- An event is pending while processed_at and dead_at are both NULL.

-- fragment: outbox_event_lease
-- Lease the candidates to the relay run %(claim)s; attempts is the fencing token. "more": whether
-- the event's aggregate had a later pending event when it was claimed (one probe of
-- outbox_aggregate_pending_idx, whose predicate it writes): the relay runs
-- outbox_event_claim_next only for the aggregates that had one. A later event committed after
-- the claim is found by the next general claim instead (the relay claims again at once after a
-- batch that found work), so skipping costs it a round at most, never the event.
UPDATE outbox_events AS o
SET claimed_at = coalesce(%(now)s::timestamptz, now()),
    claimed_by = %(relay)s,
    claim_id = %(claim)s,
    attempts = o.attempts + 1
WHERE o.id = ANY(ARRAY(SELECT id FROM candidates))
RETURNING o.id, o.organization_id, o.aggregate_type, o.aggregate_id, o.event_type,
          o.schema_version, o.payload, o.occurred_at, o.attempts, o.seq,
          EXISTS (SELECT FROM outbox_events AS n
                  WHERE n.aggregate_type = o.aggregate_type AND n.aggregate_id = o.aggregate_id
                    AND coalesce(n.processed_at, n.dead_at) IS NULL AND n.seq > o.seq) AS more

-- name: outbox_event_record
-- Insert one event in the caller's transaction and wake the relays. The notification payload is
-- constant, so PostgreSQL folds all of one transaction's notifications into one. An event is
-- available from when it occurred (never later than now: a caller's clock running ahead must not
-- hide it), which also lets tests that pin a past clock claim it.
WITH ins AS (
    INSERT INTO outbox_events (id, organization_id, aggregate_type, aggregate_id, event_type,
                               schema_version, payload, occurred_at, available_at)
    VALUES (%(id)s, %(organization_id)s::uuid, %(aggregate_type)s, %(aggregate_id)s,
            %(event_type)s, %(schema_version)s, %(payload)s::jsonb,
            coalesce(%(occurred_at)s::timestamptz, now()),
            least(coalesce(%(occurred_at)s::timestamptz, now()), now()))
    RETURNING id
)
SELECT id, pg_notify('outbox_ready', 'ready')::text IS NOT NULL AS notified FROM ins;

-- name: outbox_event_claim
-- Lease up to %(limit)s pending events for the relay run %(claim)s. Each aggregate
-- (aggregate_type, aggregate_id) has one current event: the one it has claimed, if any (the
-- unique outbox_aggregate_claimed_idx allows one), else its pending event of lowest seq. Only
-- current events are claimed, and a claimed one only once its lease (%(lease)s) has expired: so
-- at most one event per aggregate is ever claimed, events go in seq order, and a takeover after
-- an expired lease takes the same event again. seq is drawn at insert, so for transactions that
-- serialise on the aggregate it is their commit order (docs/outbox.md). Dead events no longer
-- hold their aggregate back. attempts counts claims and is the fencing token: only the holder
-- of the latest claim can mark the event.
--
-- Every step is planned to hold whatever the statistics say (a table analyzed while all its
-- events were processed estimates every pending partial index empty, so any of them looks free
-- to read whole): the pending events are walked one ORDER BY seq LIMIT 1 step of
-- outbox_pending_idx at a time (seq > the last), as far as the claim pulls; the aggregate's
-- probes say pending as coalesce(processed_at, dead_at) IS NULL, the predicate of
-- outbox_aggregate_pending_idx, which the walk's plain predicate does not imply, nor theirs
-- outbox_pending_idx's. (One filtered scan in seq order was planned as a scan and sort of every
-- pending event, each probed: 26-81 ms a claim of 100 at 10,000 pending, against 2-3 ms.)
WITH RECURSIVE pending AS (
    SELECT 0::bigint AS seq
    UNION ALL
    SELECT (SELECT e.seq FROM outbox_events AS e
            WHERE e.processed_at IS NULL AND e.dead_at IS NULL AND e.seq > p.seq
            ORDER BY e.seq
            LIMIT 1)
    FROM pending AS p
    WHERE p.seq IS NOT NULL
),
candidates AS (
    SELECT c.id
    FROM pending AS p
    CROSS JOIN LATERAL (
        SELECT e.id
        FROM outbox_events AS e
        WHERE e.seq = p.seq
          AND e.processed_at IS NULL AND e.dead_at IS NULL
          AND e.available_at <= coalesce(%(now)s::timestamptz, now())
          AND (e.claimed_at IS NULL
               OR e.claimed_at <= coalesce(%(now)s::timestamptz, now()) - %(lease)s::interval)
          -- Scalar subqueries, not NOT EXISTS: each stays a per-row probe of a partial index,
          -- where an anti-join planned without statistics (a fresh burst of events) would
          -- compare every pending row with every other.
          AND e.seq = coalesce(
              (SELECT c.seq FROM outbox_events AS c
               WHERE c.aggregate_type = e.aggregate_type AND c.aggregate_id = e.aggregate_id
                 AND c.claimed_at IS NOT NULL AND coalesce(c.processed_at, c.dead_at) IS NULL
               LIMIT 1),
              (SELECT h.seq FROM outbox_events AS h
               WHERE h.aggregate_type = e.aggregate_type AND h.aggregate_id = e.aggregate_id
                 AND coalesce(h.processed_at, h.dead_at) IS NULL
               ORDER BY h.seq
               LIMIT 1))
        LIMIT 1
        FOR UPDATE OF e SKIP LOCKED
    ) AS c
    LIMIT %(limit)s
)
{{outbox_event_lease}};

-- name: outbox_event_claim_next
-- In the transaction that marks events processed: claim the next event of each aggregate just
-- settled (the types and ids given), for the same relay run. This drains a backlog on one
-- aggregate at one event per round: the general claim scans pending events in seq order and
-- would pass over every waiting event of a deep aggregate on each round; this is one probe of
-- outbox_aggregate_pending_idx per aggregate. The marks of this transaction are visible to it,
-- so the head is the aggregate's next pending event; while this transaction is open no other
-- relay can claim in these aggregates (they see the claim being marked), so the one-claim rule
-- holds. Only an unclaimed, available head is taken, at most %(limit)s of them (the relay's
-- batch size); anything else waits for a general claim.
WITH settled AS (
    SELECT DISTINCT s.aggregate_type, s.aggregate_id
    FROM unnest(%(types)b::text[], %(ids)b::text[]) AS s(aggregate_type, aggregate_id)
),
candidates AS (
    SELECT e.id
    FROM settled AS s
    CROSS JOIN LATERAL (
        SELECT p.id FROM outbox_events AS p
        WHERE p.aggregate_type = s.aggregate_type AND p.aggregate_id = s.aggregate_id
          AND coalesce(p.processed_at, p.dead_at) IS NULL  -- its index's predicate (claim)
        ORDER BY p.seq
        LIMIT 1
    ) AS h
    JOIN outbox_events AS e ON e.id = h.id
    WHERE e.claimed_at IS NULL
      AND e.available_at <= coalesce(%(now)s::timestamptz, now())
    ORDER BY e.seq
    LIMIT %(limit)s
    FOR UPDATE OF e SKIP LOCKED
)
{{outbox_event_lease}};

-- name: outbox_event_adopt
-- After a lost connection: the events still claimed by the relay run %(claim)s, which its last
-- claim (or the transaction that settles a batch) may have left leased although the reply never
-- came. The claim is refreshed, not repeated: attempts (the fencing token) stays, so the relay
-- finishes the events under the claim it already holds. A relay that took an event over has
-- written its own claim_id, so a taken-over event is not found. Served by the small
-- outbox_aggregate_claimed_idx (claimed pending rows only).
UPDATE outbox_events AS o
SET claimed_at = coalesce(%(now)s::timestamptz, now())
WHERE o.claim_id = %(claim)s
  AND o.claimed_at IS NOT NULL AND o.processed_at IS NULL AND o.dead_at IS NULL
RETURNING o.id, o.organization_id, o.aggregate_type, o.aggregate_id, o.event_type,
          o.schema_version, o.payload, o.occurred_at, o.attempts, o.seq, true AS more;

-- fragment: outbox_event_fenced
-- The events given (the ids parameter) whose claim the caller still holds (the tokens: the
-- attempts each was claimed at), locked as an UPDATE locks them, in the order given: one
-- primary-key probe per id, whatever the table's statistics say. A join of the arrays with
-- outbox_events let the planner scan every pending event against every id: with the statistics
-- of a table a burst had just filled, it read the pending index once per batch and compared each
-- of its rows with each id (9,000 x 100 comparisons a batch, 370 us of server CPU a fact in the
-- webhooks bench). The LIMIT keeps the lateral subquery a per-id probe. "Pending" is written
-- num_nulls(processed_at, dead_at) = 2 so that no partial index of pending events matches the
-- probe (estimated empty, outbox_aggregate_pending_idx was read whole for every id), only the
-- primary key. The lock keeps the row version found (its ctid) the one the update writes:
-- a takeover that raced the probe either committed before it (the token no longer matches) or
-- waits behind this transaction.
fenced AS MATERIALIZED (
    SELECT e.ctid AS row_id, i.ord
    FROM unnest(%(ids)b::uuid[], %(tokens)b::int[]) WITH ORDINALITY AS i(id, token, ord)
    CROSS JOIN LATERAL (
        SELECT e.ctid FROM outbox_events AS e
        WHERE e.id = i.id AND e.attempts = i.token
          AND num_nulls(e.processed_at, e.dead_at) = 2
        LIMIT 1
        FOR NO KEY UPDATE
    ) AS e
)

-- name: outbox_event_mark_processed
-- Mark events processed, each only while the caller still holds its claim (same attempts).
-- Returns the ids that were marked; the caller enqueues jobs for those only, in this transaction.
-- The rows are found by the fenced probes and updated by their ctid (a TID scan).
WITH {{outbox_event_fenced}}
UPDATE outbox_events AS o
SET processed_at = coalesce(%(now)s::timestamptz, now()),
    claimed_at = NULL,
    claimed_by = NULL,
    claim_id = NULL,
    last_error = NULL
WHERE o.ctid = ANY(ARRAY(SELECT row_id FROM fenced))
RETURNING o.id;

-- name: outbox_event_mark_failed
-- Record failed projections: retry after a delay, or set the event aside (dead) for good.
-- Fenced like mark_processed; each row takes its error, delay and verdict by its place in the
-- arrays (the ordinal the fenced probe kept).
WITH {{outbox_event_fenced}},
given AS (
    SELECT f.row_id, i.error, i.delay, i.dead
    FROM fenced AS f
    JOIN unnest(%(errors)b::text[], %(delays)b::interval[], %(dead)b::bool[]) WITH ORDINALITY
         AS i(error, delay, dead, ord) ON i.ord = f.ord
)
UPDATE outbox_events AS o
SET available_at = CASE WHEN g.dead THEN o.available_at
                        ELSE coalesce(%(now)s::timestamptz, now()) + g.delay END,
    dead_at = CASE WHEN g.dead THEN coalesce(%(now)s::timestamptz, now()) END,
    claimed_at = NULL,
    claimed_by = NULL,
    claim_id = NULL,
    last_error = g.error
FROM given AS g
WHERE o.ctid = g.row_id AND o.ctid = ANY(ARRAY(SELECT row_id FROM fenced))
RETURNING o.id, o.dead_at IS NOT NULL AS dead;

-- name: outbox_event_list_dead
-- One page of dead events in the order they died, after the event %(after)s (a keyset on
-- (dead_at, seq); NULL: the first page).
SELECT id, organization_id, aggregate_type, aggregate_id, event_type, schema_version, payload,
       occurred_at, attempts, last_error, dead_at
FROM outbox_events
WHERE dead_at IS NOT NULL
  AND (%(after)s::uuid IS NULL
       OR (dead_at, seq) > (SELECT dead_at, seq FROM outbox_events WHERE id = %(after)s::uuid))
ORDER BY dead_at, seq
LIMIT %(limit)s;

-- name: outbox_event_retry_dead
-- Put dead events back in the stream with a fresh attempt budget (all of them when ids is NULL).
-- A retried event takes its place again among its aggregate's pending events by seq: after the
-- events already processed and the one claimed now, before the later pending ones.
UPDATE outbox_events
SET dead_at = NULL, attempts = 0, available_at = coalesce(%(now)s::timestamptz, now()),
    claimed_at = NULL, claimed_by = NULL, claim_id = NULL
WHERE dead_at IS NOT NULL
  AND (%(ids)b::uuid[] IS NULL OR id = ANY(%(ids)b::uuid[]))
RETURNING id;

-- name: outbox_event_stats
-- Pending and dead counts and the age of the oldest pending event; only the partial indexes are
-- read, never the processed history.
SELECT (SELECT count(*) FROM outbox_events
        WHERE processed_at IS NULL AND dead_at IS NULL) AS pending,
       (SELECT count(*) FROM outbox_events WHERE dead_at IS NOT NULL) AS dead,
       coalesce(extract(epoch FROM coalesce(%(now)s::timestamptz, now())
                - (SELECT min(occurred_at) FROM outbox_events
                   WHERE processed_at IS NULL AND dead_at IS NULL)), 0)::float8
           AS oldest_pending_age;

-- name: outbox_event_delete_processed
-- Retention: one bounded batch of the events processed more than %(age)s seconds ago. Dead
-- events (processed_at NULL) wait for a person.
WITH doomed AS (
    SELECT id FROM outbox_events
    WHERE processed_at < coalesce(%(now)s::timestamptz, now()) - make_interval(secs => %(age)s::float8)
    LIMIT %(limit)s
)
DELETE FROM outbox_events WHERE id IN (SELECT id FROM doomed);

-- name: outbox_event_table_exists
-- The metrics collector's probe: a database migrated before the outbox (jobs 0002) has no
-- outbox gauges rather than a failed scrape.
SELECT to_regclass('outbox_events') IS NOT NULL;

-- name: outbox_event_gauges
-- The metrics collector (jobs/metrics.py), once per scrape:
-- Pending events (neither processed nor set aside), the high-watermark lag (the age of the
-- oldest pending event, seconds, 0 when none) and the dead count. Served by the pending and
-- dead partial indexes.
SELECT count(*) FILTER (WHERE dead_at IS NULL)::bigint AS pending,
       coalesce(extract(epoch FROM coalesce(%(now)s::timestamptz, now())
                - min(occurred_at) FILTER (WHERE dead_at IS NULL)), 0)::float8 AS oldest_age,
       count(*) FILTER (WHERE dead_at IS NOT NULL)::bigint AS dead
FROM outbox_events
WHERE processed_at IS NULL;
