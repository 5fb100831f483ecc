-- Named queries on the jobs table (and the attempt rows its writes record), loaded by
-- jobs/queries.py.
-- Every time predicate takes %(now)s and falls back to the database clock, so production has one
-- clock (the database's) and tests pin it.

-- template: job_enqueue (unique)
-- variant: job_enqueue
-- variant: job_enqueue_unique   unique
-- Insert one job; on a conflict of its key insert nothing and return no row (the caller then
-- looks the holder up, or replaces it). job_enqueue: a job with an idempotency key, or none.
-- job_enqueue_unique: a job with a unique key (jobs_unique_active_uq), whose conflict is with
-- an active job (pending, retrying or leased; one a concurrent transaction is inserting is
-- waited for). A job has one kind of key or the other, never both (jobs/validate.py), so one
-- arbiter applies. Wakes the queue's workers only when the job is ready now; NOTIFY payloads
-- are de-duplicated by PostgreSQL within a transaction, so a transaction that enqueues many
-- jobs on one queue sends one notification.
WITH ins AS (
    INSERT INTO jobs (organization_id, queue, job_type, payload, {{job_key_column}}, priority,
                      run_at, max_attempts, created_at, trace_parent, trace_state,
                      concurrency_key, expires_at)
    VALUES (%(organization_id)s::uuid, %(queue)s, %(job_type)s, %(payload)s::jsonb,
            %({{job_key_column}})s::text, %(priority)s,
            coalesce(%(run_at)s::timestamptz, %(now)s::timestamptz, now()), %(max_attempts)s,
            coalesce(%(now)s::timestamptz, now()), %(trace_parent)s::text, %(trace_state)s::text,
            %(concurrency_key)s::text,
            coalesce(%(run_at)s::timestamptz, %(now)s::timestamptz, now())
            + %(max_lateness)s::interval)
    {{job_key_arbiter}}
    RETURNING id, run_at
)
SELECT id,
       CASE WHEN run_at <= coalesce(%(now)s::timestamptz, now())
            THEN pg_notify('tockwork_jobs', %(queue)s) END IS NOT NULL AS notified
FROM ins;

-- name: job_enqueue_defaults
-- job_enqueue for the common call (jobs/enqueue.py, _insert_query): no idempotency key, no
-- organization, run_at or pinned clock, priority 0, the default max_attempts, no concurrency
-- key, no trace. The table's defaults fill those columns as job_enqueue would (run_at and
-- created_at: now() of this transaction), so three parameters are sent instead of twelve. No ON
-- CONFLICT: without a key no arbiter index can conflict, and an insert with one is a speculative
-- insertion (a lock on the inserting transaction's token and a second WAL record, the confirm)
-- even for a row outside the arbiter's predicate. Ready now by construction: always wakes.
WITH ins AS (
    INSERT INTO jobs (queue, job_type, payload)
    VALUES (%(queue)s, %(job_type)s, %(payload)s::jsonb)
    RETURNING id, queue
)
SELECT id, pg_notify('tockwork_jobs', queue) IS NOT NULL AS notified
FROM ins;

-- name: job_find_by_key
-- The job holding an idempotency key: live or dead in jobs, or finished in job_history.
SELECT id FROM jobs
WHERE organization_id = %(organization_id)s::uuid
  AND job_type = %(job_type)s AND idempotency_key = %(idempotency_key)s
UNION ALL
SELECT id FROM job_history
WHERE job_type = %(job_type)s AND idempotency_key = %(idempotency_key)s
  AND organization_id = %(organization_id)s::uuid
LIMIT 1;

-- name: job_find_by_key_no_org
SELECT id FROM jobs
WHERE organization_id IS NULL
  AND job_type = %(job_type)s AND idempotency_key = %(idempotency_key)s
UNION ALL
SELECT id FROM job_history
WHERE job_type = %(job_type)s AND idempotency_key = %(idempotency_key)s
  AND organization_id IS NULL
LIMIT 1;

-- name: job_history_settle_key
-- job_history_settle_keys for one inserted job (jobs.enqueue), with plain parameters: a
-- quarter of the array form's cost (measured: 55 against 260 us of server CPU a call). The
-- holder's id if a finished job holds the key (the inserted job %(id)s is then deleted again).
WITH holder AS MATERIALIZED (
    SELECT id FROM job_history
    WHERE job_type = %(job_type)s AND idempotency_key = %(idempotency_key)s::text
      AND organization_id IS NOT DISTINCT FROM %(organization_id)s::uuid
    LIMIT 1
),
dropped AS (
    DELETE FROM jobs WHERE id = %(id)s::bigint AND EXISTS (SELECT FROM holder)
)
SELECT id FROM holder;

-- name: job_history_settle_keys
-- After an enqueue inserted keyed jobs, in a later statement of its transaction: the inserted
-- rows (ids; NULL for a row not inserted) whose idempotency key a finished job holds in
-- job_history are deleted again, and every row whose key job_history holds comes back as
-- (ordinal, holder). It must be a later statement: an insert that waited on a completion moving
-- the key's holder out of jobs goes on once that commits (the unique index of jobs no longer
-- sees the key), and only a snapshot taken after that commit sees the holder in job_history
-- (under READ COMMITTED every statement takes a new one). One probe of the key index per row.
WITH k AS (
    SELECT *
    FROM unnest(%(ids)b::bigint[], %(organization_ids)b::uuid[], %(job_types)b::text[],
                %(idempotency_keys)b::text[]) WITH ORDINALITY
         AS k(id, organization_id, job_type, idempotency_key, ord)
),
found AS MATERIALIZED (
    SELECT k.ord, k.id,
           (SELECT h.id FROM job_history AS h
            WHERE h.job_type = k.job_type AND h.idempotency_key = k.idempotency_key
              AND h.organization_id IS NOT DISTINCT FROM k.organization_id
            LIMIT 1) AS holder
    FROM k
),
dropped AS (
    -- The ids given first: a primary-key probe each, whatever the planner thinks of found (a
    -- sequential scan of jobs per enqueue otherwise, on a table with few rows in its statistics).
    DELETE FROM jobs
    WHERE id = ANY(%(ids)b::bigint[])
      AND id = ANY(ARRAY(SELECT id FROM found WHERE holder IS NOT NULL AND id IS NOT NULL))
)
SELECT ord, holder FROM found WHERE holder IS NOT NULL;

-- fragment: job_key_column if not unique
idempotency_key

-- fragment: job_key_column if unique
unique_key

-- fragment: job_key_arbiter if not unique
ON CONFLICT (organization_id, job_type, idempotency_key)
    WHERE idempotency_key IS NOT NULL DO NOTHING

-- fragment: job_key_arbiter if unique
ON CONFLICT (job_type, unique_key, organization_id)
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'retrying', 'leased')
    DO NOTHING

-- template: job_enqueue_many (unique)
-- variant: job_enqueue_many
-- variant: job_enqueue_many_unique   unique
-- Insert many jobs in one statement. The ids were drawn up front (job_allocate_ids), so every
-- input row can be matched to its job: a row whose id comes back was created, the others hit a
-- key and are looked up (or replaced) by the caller. Rows go in input order, so the first spec
-- of a repeated key wins, and two batches inserting the same keys wait on each other's keys in
-- one order and never deadlock.
-- job_enqueue_many: a batch that may hit idempotency keys (within the batch or in the table).
-- job_enqueue_many_unique: the rows of a batch that carry a unique key (the caller sends only
-- the first spec of each key, sorted by key), as job_enqueue_unique; an id that does not come
-- back hit an active job. A job has one kind of key or the other, so one arbiter applies.
INSERT INTO jobs (id, organization_id, queue, job_type, payload, {{job_key_column}}, priority,
                  run_at, max_attempts, created_at, trace_parent, trace_state, concurrency_key,
                  expires_at)
SELECT id, organization_id, queue, job_type, payload, {{job_key_column}}, priority, run_at,
       max_attempts, %(created_at)s::timestamptz, %(trace_parent)s::text, %(trace_state)s::text,
       concurrency_key, run_at + max_lateness
FROM unnest(%(ids)b::bigint[], %(organization_ids)b::uuid[], %(queues)b::text[],
            %(job_types)b::text[], %(payloads)b::jsonb[], %({{job_key_column}}s)b::text[],
            %(priorities)b::int[], %(run_ats)b::timestamptz[], %(max_attempts)b::int[],
            %(concurrency_keys)b::text[], %(max_latenesses)b::interval[])
     WITH ORDINALITY
     AS t(id, organization_id, queue, job_type, payload, {{job_key_column}}, priority, run_at,
          max_attempts, concurrency_key, max_lateness, ord)
ORDER BY ord
{{job_key_arbiter}}
RETURNING id;

-- name: job_find_many_by_key
-- The holders of a batch of idempotency keys, live or dead in jobs or finished in job_history:
-- (ordinal, id) for each key held. Scalar subqueries, so each stays a probe per key.
SELECT ord, id
FROM (
    SELECT k.ord,
           coalesce(
               CASE WHEN k.organization_id IS NULL
                    THEN (SELECT j.id FROM jobs AS j
                          WHERE j.organization_id IS NULL AND j.job_type = k.job_type
                            AND j.idempotency_key = k.idempotency_key)
                    ELSE (SELECT j.id FROM jobs AS j
                          WHERE j.organization_id = k.organization_id
                            AND j.job_type = k.job_type
                            AND j.idempotency_key = k.idempotency_key) END,
               (SELECT h.id FROM job_history AS h
                WHERE h.job_type = k.job_type AND h.idempotency_key = k.idempotency_key
                  AND h.organization_id IS NOT DISTINCT FROM k.organization_id
                LIMIT 1)) AS id
    FROM unnest(%(organization_ids)b::uuid[], %(job_types)b::text[],
                %(idempotency_keys)b::text[])
         WITH ORDINALITY AS k(organization_id, job_type, idempotency_key, ord)
) AS held
WHERE id IS NOT NULL;

-- name: job_replace_by_unique_key
-- on_active='replace': the waiting (pending or retrying) job holding the unique key takes the
-- new payload, run_at, priority, max_attempts and expiry; its id, queue, concurrency key,
-- attempts and history stay. A leased job is running and is not touched (nor locked: the status test comes
-- before the row lock, so a worker's completion never waits on the enqueuer's transaction).
UPDATE jobs
SET payload = %(payload)s::jsonb,
    run_at = coalesce(%(run_at)s::timestamptz, %(now)s::timestamptz, now()),
    priority = %(priority)s,
    max_attempts = %(max_attempts)s,
    expires_at = coalesce(%(run_at)s::timestamptz, %(now)s::timestamptz, now())
                 + %(max_lateness)s::interval
WHERE job_type = %(job_type)s AND unique_key = %(unique_key)s::text
  AND organization_id IS NOT DISTINCT FROM %(organization_id)s::uuid
  AND status IN ('pending', 'retrying')
RETURNING id,
          CASE WHEN run_at <= coalesce(%(now)s::timestamptz, now())
               THEN pg_notify('tockwork_jobs', queue) END IS NOT NULL AS notified;

-- name: job_find_active_by_unique_key
SELECT id FROM jobs
WHERE job_type = %(job_type)s AND unique_key = %(unique_key)s::text
  AND organization_id IS NOT DISTINCT FROM %(organization_id)s::uuid
  AND status IN ('pending', 'retrying', 'leased');

-- name: job_replace_many_by_unique_key
-- job_replace_by_unique_key for a batch (keys distinct within it): returns the ordinal of each
-- input row that replaced a waiting job, that job's id, queue and new run_at. The rows are
-- locked in input order (the caller sorts it by key), so concurrent batches replacing the same
-- keys wait on each other in one order instead of deadlocking; a row claimed meanwhile is
-- rechecked after the wait and left alone.
WITH input AS (
    SELECT *
    FROM unnest(%(organization_ids)b::uuid[], %(job_types)b::text[], %(unique_keys)b::text[],
                %(payloads)b::jsonb[], %(priorities)b::int[], %(run_ats)b::timestamptz[],
                %(max_attempts)b::int[], %(max_latenesses)b::interval[])
         WITH ORDINALITY
         AS t(organization_id, job_type, unique_key, payload, priority, run_at, max_attempts,
              max_lateness, ord)
),
locked AS (
    SELECT j.id
    FROM input AS i
    JOIN jobs AS j
      ON j.job_type = i.job_type AND j.unique_key = i.unique_key
     AND j.organization_id IS NOT DISTINCT FROM i.organization_id
    WHERE j.status IN ('pending', 'retrying')
    ORDER BY i.ord
    FOR UPDATE OF j
)
-- The rows by primary key (ANY(ARRAY(...)): the planner guesses one row for a locking CTE,
-- and a join on it became a nested loop over both sides), matched to their input by key.
UPDATE jobs AS j
SET payload = i.payload,
    run_at = i.run_at,
    priority = i.priority,
    max_attempts = i.max_attempts,
    expires_at = i.run_at + i.max_lateness
FROM input AS i
WHERE j.id = ANY(ARRAY(SELECT id FROM locked))
  AND j.job_type = i.job_type AND j.unique_key = i.unique_key
  AND j.organization_id IS NOT DISTINCT FROM i.organization_id
RETURNING i.ord, j.id, j.queue, j.run_at;

-- name: job_find_many_active_by_unique_key
SELECT k.ord, j.id
FROM unnest(%(organization_ids)b::uuid[], %(job_types)b::text[], %(unique_keys)b::text[])
     WITH ORDINALITY AS k(organization_id, job_type, unique_key, ord)
JOIN jobs AS j
  ON j.job_type = k.job_type AND j.unique_key = k.unique_key
 AND j.organization_id IS NOT DISTINCT FROM k.organization_id
 AND j.status IN ('pending', 'retrying', 'leased');

-- name: job_active_among
-- Which of these jobs are still active (pending, retrying or leased), with their status: the
-- scheduler's overlap policies (scheduler/overlap.py) ask it of the jobs a schedule enqueued
-- last. A primary-key probe per id.
SELECT id, status FROM jobs
WHERE id = ANY(%(ids)b::bigint[]) AND status IN ('pending', 'retrying', 'leased');

-- fragment: job_columns
-- Job's fields in their order (jobs/store.py builds a Job from a row positionally; the column
-- is 'attempts' where the field is 'attempt').
id, queue, job_type, payload, attempts, max_attempts, idempotency_key, organization_id,
priority, run_at, created_at, lease_token, trace_parent, trace_state, expires_at

-- fragment: job_lease_token_floor
-- The smallest fencing token a claim may hand out on this server: the timeline of the WAL it
-- writes (read once per statement, an InitPlan) in the high 32 bits. A promotion starts a new
-- timeline, so a token issued after a failover is above every token issued before it, also the
-- ones the new primary never received (asynchronous replication loses the last commits, the
-- token bumps with them, and a plain "+ 1" would hand the lost (job, token) pair out again to
-- a second worker). pg_walfile_name names the current insert timeline (PostgreSQL 15 and
-- later); docs/operations.md, "Failover", states the rule.
(SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::bigint << 32)

-- fragment: job_ready_levels
-- levels: the priorities with waiting (pending or retrying) jobs in queue {{queue}} (narrowed by
-- {{scope}}), highest first, by a loose index scan of the ready index (one probe a priority),
-- and a NULL last; a CTE of a WITH RECURSIVE. Also read by the dashboard's queue figures
-- (scheduler/sql/dashboard.sql, as jobs.job_ready_levels).
levels AS (
    (SELECT priority FROM jobs
     WHERE queue = {{queue}} AND status IN ('pending', 'retrying')
       {{scope}}
     ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT lv.priority FROM jobs AS lv
            WHERE lv.queue = {{queue}} AND lv.status IN ('pending', 'retrying')
              {{scope}}
              AND lv.priority < l.priority
            ORDER BY lv.priority DESC LIMIT 1)
    FROM levels AS l
    WHERE l.priority IS NOT NULL
)

-- fragment: job_ready_scan if not skip_scan
-- The ready jobs of queue {{queue}} (narrowed by {{scope}}), best first, at most {{limit}},
-- locked (SKIP LOCKED) unless {{filter}} refuses them: id, job_type, key, priority, run_at.
-- One priority at a time: the priorities with waiting jobs by a loose index scan of the ready
-- index, then each one's ready jobs as an index range (queue, [organization,] priority,
-- run_at <= now). Read in (priority, run_at) order in one scan instead, a queue whose waiting
-- jobs are mostly in the future (a herd enqueued ahead) would be read past every future row
-- whenever fewer jobs are due than wanted: PostgreSQL before 18 cannot skip over the priority
-- column (measured on 15: 111 ms a claim with a million future jobs, against well under a
-- millisecond this way; a fair claim 70.7 ms against 6.1 ms).
WITH RECURSIVE {{job_ready_levels queue=queue scope=scope}}
SELECT d.id, d.job_type, d.key, d.priority, d.run_at
-- unnest(ARRAY(...)) rather than the CTE itself: the planner then expects a few levels, not a
-- hundred, and its cost estimate stays below jit_above_cost (JIT compiling this statement would
-- take longer than running it).
FROM unnest(ARRAY(SELECT priority FROM levels WHERE priority IS NOT NULL)) AS l(priority)
CROSS JOIN LATERAL (
    SELECT id, job_type, concurrency_key AS key, priority, run_at FROM jobs
    WHERE queue = {{queue}}
      AND status IN ('pending', 'retrying')
      {{scope}}
      AND priority = l.priority
      AND run_at <= coalesce(%(now)s::timestamptz, now())
      {{filter}}
    ORDER BY run_at, id
    LIMIT {{limit}}
    FOR UPDATE SKIP LOCKED
) AS d
ORDER BY d.priority DESC, d.run_at, d.id
LIMIT {{limit}}

-- fragment: job_ready_scan if skip_scan
-- The ready jobs of queue {{queue}} (narrowed by {{scope}}), best first, at most {{limit}},
-- locked (SKIP LOCKED) unless {{filter}} refuses them: id, job_type, key, priority, run_at.
-- PostgreSQL 18 and later skip-scan the ready indexes past their priority column by
-- themselves: the single ordered scan, without the loose scan of the priorities, which costs
-- more than it saves there (measured on 18: a one-job claim 2.75 ms against 3.6 ms; a fair
-- claim of 10 3.9 ms against 4.8 ms with a million future jobs).
SELECT id, job_type, concurrency_key AS key, priority, run_at FROM jobs
WHERE queue = {{queue}}
  AND status IN ('pending', 'retrying')
  {{scope}}
  AND run_at <= coalesce(%(now)s::timestamptz, now())
  {{filter}}
ORDER BY priority DESC, run_at, id
LIMIT {{limit}}
FOR UPDATE SKIP LOCKED

-- fragment: job_claim_rate_limits if limited
-- The bucket rows of the claimed queues and of the caller's job types (job_types; NULL: every
-- job type), locked in (scope, name) order, so concurrent claimers take turns on them, and only
-- on them: with no limit row the claim locks nothing more. Each bucket is refilled by the time
-- elapsed; allow is the whole tokens it may give now.
limits AS MATERIALIZED (
    SELECT scope, name, per_second, per_minute, second_tokens, minute_tokens, refilled_at,
           paused_until, recent_at, recent_n
    FROM job_rate_limits
    WHERE (scope = 'queue' AND name = ANY(%(queues)b::text[]))
       OR (scope = 'job_type' AND (%(job_types)b::text[] IS NULL
                                   OR name = ANY(%(job_types)b::text[])))
    ORDER BY scope, name
    FOR UPDATE
),
buckets AS MATERIALIZED (
    SELECT l.scope, l.name, b.second, b.minute, t.as_of,
           CASE WHEN l.paused_until > t.as_of THEN 0
                ELSE greatest(0, floor(least(
                         b.second, coalesce(b.minute, b.second),
                         -- the one-second window: what the claims of the last second left
                         l.per_second - job_rate_limit_window(
                             l.recent_at, l.recent_n, t.as_of))))::int
           END AS allow
    FROM limits AS l,
         -- the instant of the spend: after the limit rows are locked (a claim that waited for
         -- another claimer's commit must not count its tokens at its transaction's start)
         LATERAL (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS as_of) AS t,
         -- job_rate_limit_refill (schema.sql) is inlined here; minute is NULL without a
         -- per-minute limit (least and greatest skip NULLs)
         LATERAL (SELECT job_rate_limit_refill(l.second_tokens, l.per_second, 1, l.refilled_at,
                                               t.as_of) AS second,
                         job_rate_limit_refill(l.minute_tokens, l.per_minute, 60, l.refilled_at,
                                               t.as_of) AS minute
                 ) AS b
),
held_back AS (
    -- Job types that may not start in this claim: out of tokens or paused, or not handled.
    SELECT coalesce(array_agg(name), '{}') AS job_types
    FROM (SELECT name FROM buckets WHERE scope = 'job_type' AND allow < 1
          UNION ALL
          SELECT name FROM job_rate_limits
          WHERE scope = 'job_type' AND %(job_types)b::text[] IS NOT NULL
            AND name <> ALL(%(job_types)b::text[])) AS t
),

-- fragment: job_claim_held_back if limited
-- Not "job_type <> ALL(...)": from its statistics (one job type in most queues) the planner
-- would expect no row to pass and sort the whole queue instead of reading the ready index in
-- order.
AND array_position((SELECT job_types FROM held_back)::text[], job_type) IS NULL

-- fragment: job_claim_wanted_n if limited
least(w.n, coalesce(b.allow, w.n))

-- fragment: job_claim_wanted_n if not limited
w.n

-- fragment: job_claim_queue_bucket if limited
LEFT JOIN buckets AS b ON b.scope = 'queue' AND b.name = w.queue

-- fragment: job_claim_policy if fair
, coalesce(p.fair, false) AS fair, p.concurrency_per_key AS k

-- fragment: job_claim_policy_join if fair
LEFT JOIN job_queue_policies AS p ON p.queue = w.queue

-- fragment: job_claim_plain_from if limited
-- The queues and their n, after the queue buckets (wanted).
wanted AS w

-- fragment: job_claim_plain_from if not limited
-- The queues and their n as given: wanted, a CTE this statement then does not reference, is
-- left out of the plan (measured: 0.04 ms of a 1 ms one-job claim, with the columns below).
unnest(%(queues)b::text[], %(limits)b::int[]) AS w(queue, n)

-- fragment: job_claim_plain_columns if limited
c.id, c.job_type, c.priority, c.run_at, w.queue

-- fragment: job_claim_plain_columns if not limited
c.id

-- fragment: job_claim_plain_cte if limited
candidates

-- fragment: job_claim_plain_cte if not limited
-- Nothing to admit: the candidates are what is leased (one CTE less to plan).
admitted

-- fragment: job_claim_plain if not fair
, {{job_claim_plain_cte}} AS (
    SELECT {{job_claim_plain_columns}}
    FROM {{job_claim_plain_from}}
    CROSS JOIN LATERAL (
        {{job_ready_scan queue=w.queue scope= filter=job_claim_held_back limit=w.n}}
    ) AS c
)

-- fragment: job_claim_fair_filter
{{job_claim_held_back}}
AND (q.k IS NULL OR concurrency_key IS NULL OR concurrency_key <> ALL(q.full_keys))

-- fragment: job_claim_fair_scope
AND coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid) = r.org

-- fragment: job_claim_refill_filter
{{job_claim_fair_filter}}
AND id <> ALL(q.ids)

-- fragment: job_claim_refill_limit
greatest(q.n - cardinality(q.ids), 0)

-- fragment: job_claim_fair if fair
-- The fair round (a queue with a policy, job_queue_policies): the organizations with ready work
-- are found by a loose index scan over jobs_ready_org_idx (a missing organization is the nil
-- UUID, one organization), at most greatest(n, 8) of them, starting after the start parameter and
-- wrapping around, so a claim costs the same with one organization of a million jobs or ten
-- thousand organizations, and every organization is reached in turn; each found one gives up
-- to ceil(n / found) of its first jobs, handed out round robin; the plain order fills the rest
-- (jobs of an organization past the round, or left over).
-- Per-key limit K: keys with K leased jobs in the queue are skipped, and one claim takes at most
-- K minus the leased count of a key. Race-free only after job_queue_policy_lock in an earlier
-- statement of the same transaction (jobs/store.py). A candidate that loses to the limit is
-- locked until commit but not leased.
, leased_keys AS (
    SELECT j.queue, j.concurrency_key AS key, count(*)::int AS leased
    FROM jobs AS j
    WHERE j.status = 'leased' AND j.concurrency_key IS NOT NULL
      AND j.queue = ANY(ARRAY(SELECT queue FROM wanted WHERE k IS NOT NULL))
    GROUP BY j.queue, j.concurrency_key
),
queues AS (
    SELECT w.*,
           ARRAY(SELECT l.key FROM leased_keys AS l
                 WHERE l.queue = w.queue AND l.leased >= w.k) AS full_keys
    FROM wanted AS w
),
orgs AS (
    SELECT q.queue, o.org, o.pos
    FROM queues AS q
    CROSS JOIN LATERAL (
        WITH RECURSIVE walk AS (
            SELECT coalesce(after.org, low.org) AS org, 1 AS pos, after.org IS NULL AS wrapped
            FROM (SELECT 1) AS one
            LEFT JOIN LATERAL (
                SELECT coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
                       AS org
                FROM jobs
                WHERE queue = q.queue AND status IN ('pending', 'retrying')
                  AND coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
                      > %(start)s::uuid
                ORDER BY 1 LIMIT 1
            ) AS after ON true
            LEFT JOIN LATERAL (
                SELECT coalesce(organization_id, '00000000-0000-0000-0000-000000000000'::uuid)
                       AS org
                FROM jobs
                WHERE queue = q.queue AND status IN ('pending', 'retrying')
                ORDER BY 1 LIMIT 1
            ) AS low ON after.org IS NULL
            WHERE q.fair
          UNION ALL
            -- The next organization after walk.org; past the last one, wrap around to the
            -- lowest (once), and stop on reaching the start again.
            SELECT nx.org, walk.pos + 1, nx.wrapped
            FROM walk
            CROSS JOIN LATERAL (
                SELECT coalesce(nxt.org, low.org) AS org, walk.wrapped OR nxt.org IS NULL AS wrapped
                FROM (SELECT 1) AS one
                LEFT JOIN LATERAL (
                    SELECT coalesce(organization_id,
                                    '00000000-0000-0000-0000-000000000000'::uuid) AS org
                    FROM jobs
                    WHERE queue = q.queue AND status IN ('pending', 'retrying')
                      AND coalesce(organization_id,
                                   '00000000-0000-0000-0000-000000000000'::uuid) > walk.org
                    ORDER BY 1 LIMIT 1
                ) AS nxt ON true
                LEFT JOIN LATERAL (
                    SELECT coalesce(organization_id,
                                    '00000000-0000-0000-0000-000000000000'::uuid) AS org
                    FROM jobs
                    WHERE queue = q.queue AND status IN ('pending', 'retrying')
                    ORDER BY 1 LIMIT 1
                ) AS low ON nxt.org IS NULL AND NOT walk.wrapped
            ) AS nx
            WHERE walk.pos < greatest(q.n, 8) AND nx.org IS NOT NULL
              AND NOT (nx.wrapped AND nx.org > %(start)s::uuid)
        )
        SELECT walk.org, walk.pos FROM walk WHERE walk.org IS NOT NULL
    ) AS o
),
rounds AS (
    SELECT o.queue, o.org, o.pos,
           ceil(q.n::numeric / count(*) OVER (PARTITION BY o.queue))::int AS quota
    FROM orgs AS o JOIN queues AS q ON q.queue = o.queue
),
picked AS (
    SELECT r.queue, c.id, c.job_type, c.key, c.rn AS r1, r.pos::bigint AS r2
    FROM rounds AS r
    JOIN queues AS q ON q.queue = r.queue
    CROSS JOIN LATERAL (
        SELECT s.id, s.job_type, s.key, row_number() OVER (ORDER BY s.priority DESC, s.run_at, s.id) AS rn
        FROM (
            {{job_ready_scan queue=q.queue scope=job_claim_fair_scope filter=job_claim_fair_filter limit=r.quota}}
        ) AS s
    ) AS c
),
taken AS (
    SELECT q.*, ARRAY(SELECT p.id FROM picked AS p WHERE p.queue = q.queue) AS ids
    FROM queues AS q
),
refill AS (
    SELECT q.queue, c.id, c.job_type, c.key, 1000000 + c.rn AS r1, 0::bigint AS r2
    FROM taken AS q
    CROSS JOIN LATERAL (
        SELECT s.id, s.job_type, s.key, row_number() OVER (ORDER BY s.priority DESC, s.run_at, s.id) AS rn
        FROM (
            {{job_ready_scan queue=q.queue scope= filter=job_claim_refill_filter limit=job_claim_refill_limit}}
        ) AS s
    ) AS c
),
ranked AS (
    SELECT a.queue, a.id, a.job_type, a.key, a.r1, a.r2,
           row_number() OVER (PARTITION BY a.queue, a.key ORDER BY a.r1, a.r2) AS of_key
    FROM (SELECT * FROM picked UNION ALL SELECT * FROM refill) AS a
),
allowed AS (
    SELECT r.queue, r.id, r.job_type,
           row_number() OVER (PARTITION BY r.queue ORDER BY r.r1, r.r2) AS nth
    FROM ranked AS r
    JOIN queues AS q ON q.queue = r.queue
    LEFT JOIN leased_keys AS l ON l.queue = r.queue AND l.key = r.key
    WHERE q.k IS NULL OR r.key IS NULL OR r.of_key <= q.k - coalesce(l.leased, 0)
),
candidates AS (
    SELECT a.id, a.job_type, a.queue, a.nth
    FROM allowed AS a JOIN queues AS q ON q.queue = a.queue WHERE a.nth <= q.n
)

-- fragment: job_claim_admit if fair
, admitted AS (
    {{job_claim_admitted}}
)

-- fragment: job_claim_admit if limited and not fair
, admitted AS (
    {{job_claim_admitted}}
)

-- fragment: job_claim_admitted if fair and not limited
SELECT id FROM candidates

-- fragment: job_claim_admitted if limited and not fair
-- Without job type limits, every candidate (the one-time filter skips the ranking).
SELECT id, job_type, queue FROM candidates
WHERE NOT EXISTS (SELECT 1 FROM buckets WHERE scope = 'job_type')
UNION ALL
-- A limited job type starts at most its tokens across the queues, in claim order.
SELECT r.id, r.job_type, r.queue
FROM (SELECT c.*, row_number() OVER (PARTITION BY c.job_type
                                     ORDER BY c.priority DESC, c.run_at, c.id) AS k
      FROM candidates AS c) AS r
LEFT JOIN buckets AS b ON b.scope = 'job_type' AND b.name = r.job_type
WHERE EXISTS (SELECT 1 FROM buckets WHERE scope = 'job_type')
  AND (b.allow IS NULL OR r.k <= b.allow)

-- fragment: job_claim_admitted if limited and fair
-- A limited job type starts at most its tokens, in the order of the round.
SELECT r.id, r.job_type, r.queue
FROM (SELECT c.*, row_number() OVER (PARTITION BY c.job_type ORDER BY c.queue, c.nth) AS k
      FROM candidates AS c) AS r
LEFT JOIN buckets AS b ON b.scope = 'job_type' AND b.name = r.job_type
WHERE b.allow IS NULL OR r.k <= b.allow

-- fragment: job_claim_spent if limited
,
spent AS (
    -- Every admitted row is locked by this claim and leased below, so the tokens taken are
    -- the admitted counts. A bucket nothing was taken from is left alone: refilling later from
    -- the old refilled_at gives the same tokens.
    UPDATE job_rate_limits AS l
    SET second_tokens = b.second - u.n,
        minute_tokens = b.minute - u.n,
        refilled_at = greatest(l.refilled_at, b.as_of),
        -- this claim joins the window; claims older than a second leave it
        recent_at = ARRAY(SELECT r.at
                          FROM unnest(l.recent_at, l.recent_n) WITH ORDINALITY AS r(at, n, i)
                          WHERE r.at > b.as_of - interval '1 second'
                          ORDER BY r.i)
                    || b.as_of,
        recent_n = ARRAY(SELECT r.n
                         FROM unnest(l.recent_at, l.recent_n) WITH ORDINALITY AS r(at, n, i)
                         WHERE r.at > b.as_of - interval '1 second'
                         ORDER BY r.i)
                   || u.n::int
    FROM buckets AS b,
         (SELECT 'queue' AS scope, queue AS name, count(*) AS n FROM admitted GROUP BY queue
          UNION ALL
          SELECT 'job_type', job_type, count(*) FROM admitted GROUP BY job_type) AS u
    WHERE EXISTS (SELECT 1 FROM buckets)
      AND b.scope = u.scope AND b.name = u.name
      AND l.scope = b.scope AND l.name = b.name
)

-- template: job_claim (fair, limited, skip_scan)
-- Lease up to n ready jobs per queue in one short statement. SKIP LOCKED lets claimers pass
-- each other; every claim bumps the fencing token, so only the current holder can write the
-- outcome. The rows carry the caller's claim id, so a caller that lost the reply can find them
-- (job_claim_lookup). Parameters: queues and limits (n per queue), worker, lease, claim, now,
-- job_types (the job types the caller handles; NULL: every one), and start for a fair claim.
-- One statement, composed from the fragments above; jobs/store.py picks the variant:
-- fair: the queue has a policy (job_queue_policies: the round of organizations, per-key
--   limits); one statement per such queue, starting its round after the start parameter (the last
--   organization the caller served; a random UUID at first). The policy is read here, so a
--   queue whose policy was just cleared is claimed in plain order.
-- limited: some rate limit exists (job_rate_limits, jobs/limits.py). A queue starts at most the
--   whole tokens of its limit, a limited job type at most its own across all the claimed
--   queues, and what starts is taken from the buckets in the same statement. A job held back
--   waits in the queue as it was (no attempt used). A job type limited but not among the
--   caller's job types is left to a worker that handles it. Without a limit row the buckets
--   are not read at all (their planning and execution tripled the cost of a one-job claim:
--   5.5 ms against 2.6 ms on PostgreSQL 18).
-- skip_scan: PostgreSQL 18 and later (job_ready_scan).
-- variant: job_claim                            limited
-- variant: job_claim_skip_scan                  limited skip_scan
-- variant: job_claim_unlimited
-- variant: job_claim_unlimited_skip_scan        skip_scan
-- variant: job_claim_fair                       fair limited
-- variant: job_claim_fair_skip_scan             fair limited skip_scan
-- variant: job_claim_fair_unlimited             fair
-- variant: job_claim_fair_unlimited_skip_scan   fair skip_scan
-- Lease up to n ready jobs per queue in one short statement (job_claim, composed in
-- jobs/sql/job.sql): SKIP LOCKED, a new fencing token and the caller's claim id on each row.
WITH {{job_claim_rate_limits}}
wanted AS (
    SELECT w.queue, {{job_claim_wanted_n}} AS n {{job_claim_policy}}
    FROM unnest(%(queues)b::text[], %(limits)b::int[]) AS w(queue, n)
    {{job_claim_policy_join}}
    {{job_claim_queue_bucket}}
)
{{job_claim_plain}}
{{job_claim_fair}}
{{job_claim_admit}}
{{job_claim_spent}}
UPDATE jobs AS j
SET status = 'leased',
    attempts = j.attempts + 1,
    locked_at = coalesce(%(now)s::timestamptz, now()),
    locked_by = %(worker)s,
    locked_until = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
    lease_token = greatest(j.lease_token + 1, {{job_lease_token_floor}}),
    claim_id = %(claim)s::uuid
-- ANY(ARRAY(...)) rather than a join: the planner cannot see the LIMIT inside the lateral
-- subquery, guesses thousands of rows and would hash-join over a scan of the whole table.
WHERE j.id = ANY(ARRAY(SELECT id FROM admitted))
RETURNING {{job_columns}};

-- name: job_claim_lookup
-- After a lost reply (jobs/worker.py): the rows a claim leased that are still leased under it.
-- Every end of a lease changes the status and every new claim its id, so these are exactly the
-- leases the claim holds. Only leased rows are read (the partial jobs_leased_idx).
SELECT {{job_columns}}
FROM jobs
WHERE status = 'leased' AND claim_id = %(claim)s::uuid;

-- fragment: job_history_columns
-- Every column of jobs, in job_history's order: what a move from one to the other carries.
id, organization_id, queue, job_type, payload, idempotency_key, status, priority, run_at,
attempts, max_attempts, locked_at, locked_by, locked_until, lease_token, last_error_code,
last_error_summary, completed_at, created_at, claim_id, started_token, unstarted_expiries,
concurrency_key, trace_parent, trace_state, unique_key, heartbeat_at, expires_at

-- name: job_complete
-- Record the outcomes of a batch of attempts. A row is written only while the caller still
-- holds its lease (same fencing token); an outcome that lost its lease is kept in the history
-- as 'fenced' and changes nothing else; the ids of those are returned. delays, attempt_deltas,
-- codes and summaries may each be
-- a NULL array (a batch of successes): unnest pads it with NULLs, and a NULL delta is 0.
-- statuses and outcomes are NULL arrays together when every attempt succeeded (each is then
-- 'succeeded'), never one NULL element among others.
-- A job that ends (succeeded, cancelled, expired) leaves jobs for job_history in this statement
-- (deleted, and its row as it ends inserted there); one that goes on (retrying, pending after
-- a snooze) or goes dead stays, updated.
WITH input AS (
    SELECT t.id, t.token, t.attempt, t.queue, t.job_type,
           coalesce(t.status, 'succeeded') AS status, coalesce(t.outcome, 'succeeded') AS outcome,
           t.delay, t.attempt_delta, t.code, t.summary, t.started_at, t.duration_ms
    FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(attempts)b::int[],
                %(queues)b::text[], %(job_types)b::text[], %(statuses)b::text[],
                %(outcomes)b::text[], %(delays)b::interval[], %(attempt_deltas)b::int[],
                %(codes)b::text[], %(summaries)b::text[], %(started)b::timestamptz[],
                %(durations)b::float8[])
         AS t(id, token, attempt, queue, job_type, status, outcome, delay, attempt_delta,
              code, summary, started_at, duration_ms)
),
updated AS (
    UPDATE jobs AS j
    SET status = i.status,
        run_at = CASE WHEN i.status IN ('pending', 'retrying')
                      THEN coalesce(%(now)s::timestamptz, now()) + i.delay
                      ELSE j.run_at END,
        attempts = j.attempts + coalesce(i.attempt_delta, 0),
        unstarted_expiries = 0,  -- it ran: a run of unstarted expiries ends (job_reap)
        locked_at = NULL,
        locked_by = NULL,
        locked_until = NULL,
        last_error_code = coalesce(i.code, j.last_error_code),
        last_error_summary = coalesce(i.summary, j.last_error_summary),
        completed_at = CASE WHEN i.status = 'dead' THEN coalesce(%(now)s::timestamptz, now()) END,
        lease_token = j.lease_token + 1
    FROM input AS i
    -- Fencing: every change that ends a lease (complete, reap, release) bumps the token, so a
    -- matching token means "still leased by this claim". (A status = 'leased' test here would
    -- tempt the planner into scanning the partial leased index, dead entries included.)
    WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = i.id AND j.lease_token = i.token
      AND i.status NOT IN ('succeeded', 'cancelled', 'expired')
    RETURNING j.id
),
ended AS (
    -- The same fencing, for the jobs that end: their row leaves jobs as it ends. A probe of
    -- jobs_pkey per ending input row (j.id = i.id alone, no ANY(ids)): with ANY(ids) as well,
    -- a generic plan (prepared statements switch to one after five executions) expects ten
    -- ids and a third of them ending, and was seen joining the two in a nested loop over the
    -- materialized ANY scan: every ending row compared with every id, 131,841 comparisons and
    -- 25 ms of a 28 ms completion of 514 jobs (docs/performance.md, issue 22's fourth pass).
    -- The ending rows' estimate (a status filter on unnest) stays small in every plan, so the
    -- probes never give way to a scan of the table.
    DELETE FROM jobs AS j
    USING input AS i
    WHERE j.id = i.id AND j.lease_token = i.token
      AND i.status IN ('succeeded', 'cancelled', 'expired')
    RETURNING j.id, j.organization_id, j.queue, j.job_type, j.payload, j.idempotency_key,
              i.status, j.priority, j.run_at, j.attempts + coalesce(i.attempt_delta, 0),
              j.max_attempts, NULL::timestamptz, NULL::text, NULL::timestamptz,
              j.lease_token + 1, coalesce(i.code, j.last_error_code),
              coalesce(i.summary, j.last_error_summary), coalesce(%(now)s::timestamptz, now()),
              j.created_at, j.claim_id, j.started_token, 0::smallint, j.concurrency_key,
              j.trace_parent, j.trace_state, j.unique_key, j.heartbeat_at, j.expires_at
),
moved AS (
    INSERT INTO job_history ({{job_history_columns}})
    SELECT * FROM ended
),
written AS (
    INSERT INTO job_attempts (job_id, attempt, queue, job_type, worker, started_at, finished_at,
                              outcome, error_code, error_summary, duration_ms)
    SELECT i.id, i.attempt, i.queue, i.job_type, %(worker)s, i.started_at,
           coalesce(%(now)s::timestamptz, now()),
           CASE WHEN u.id IS NULL THEN 'fenced' ELSE i.outcome END,
           i.code, i.summary, i.duration_ms
    FROM input AS i
    LEFT JOIN (SELECT id FROM updated UNION ALL SELECT id FROM ended) AS u ON u.id = i.id
    -- An expired job did not run: no attempt row (its claim's attempt is given back, as by
    -- job_release_unstarted), unless its lease was lost (fenced, recorded as always).
    WHERE u.id IS NULL OR i.outcome <> 'expired'
    RETURNING job_id, outcome
)
-- Only the fenced ids come back: every other attempt was written with its own outcome, so a
-- batch of hundreds returns (and the worker parses) no row at all in the usual case.
SELECT job_id FROM written WHERE outcome = 'fenced';

-- name: job_heartbeat
-- Extend the leases the caller still holds (same fencing token); the ids not returned were
-- lost: reaped, released, or taken over by another claim. The leases of the started ids are
-- also marked started (as job_mark_started does). heartbeat_at records when (the dashboard's
-- heartbeat age; not indexed).
UPDATE jobs AS j
SET locked_until = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
    heartbeat_at = coalesce(%(now)s::timestamptz, now()),
    started_token = CASE WHEN j.id = ANY(%(started)b::bigint[]) THEN j.lease_token
                         ELSE j.started_token END,
    unstarted_expiries = CASE WHEN j.id = ANY(%(started)b::bigint[]) THEN 0
                              ELSE j.unstarted_expiries END
FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[]) AS t(id, token)
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = t.id AND j.lease_token = t.token
RETURNING j.id;

-- name: job_mark_started
-- The leases (same fencing token) whose jobs a worker's threads have started: a reaper that
-- finds one expired counts the attempt (job_reap). Sent in the transaction of the worker's next
-- claim, so it costs no round trip; a job that started and finished within one cycle needs no
-- mark (its outcome ends the lease). Marking also ends a run of unstarted expiries.
UPDATE jobs AS j
SET started_token = j.lease_token,
    unstarted_expiries = 0
FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[]) AS t(id, token)
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = t.id AND j.lease_token = t.token;

-- name: job_lock_leased
-- The completion transaction with database effects (jobs/batch.py): lock the rows of the jobs
-- whose effects are about to run, where this worker still holds the lease (same fencing
-- token). A row taken over meanwhile is not returned, so its effects never run; a locked row
-- cannot be reaped (the reaper skips locked rows) before the outcome is written.
SELECT j.id
FROM jobs AS j, unnest(%(ids)b::bigint[], %(tokens)b::bigint[]) AS t(id, token)
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = t.id AND j.lease_token = t.token
FOR UPDATE OF j;

-- name: job_reap
-- Return expired leases to the queue (or to dead when attempts are exhausted) and record a
-- 'lease_expired' attempt. Bounded and SKIP LOCKED: any number of workers may run it at once.
-- A lease whose job was never reported started under it (started_token, set by
-- job_mark_started and job_heartbeat) was claimed ahead and its worker died before a thread
-- took it, or right after: the claim's attempt is given back, as by job_release_unstarted (no
-- attempt row; the job did not run, or not long enough to be reported), and the expiry is
-- counted. After unstarted_limit such expiries in a row (a job that kills its worker as it
-- starts), an unmarked expiry uses its attempt like any other, with the code 'crash_loop'.
WITH expired AS (
    SELECT id, locked_by, locked_at, locked_until,
           started_token IS DISTINCT FROM lease_token AS unmarked,
           started_token IS DISTINCT FROM lease_token
               AND unstarted_expiries < %(unstarted_limit)s AS unstarted
    FROM jobs
    WHERE status = 'leased' AND locked_until < coalesce(%(now)s::timestamptz, now())
    ORDER BY locked_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
updated AS (
    UPDATE jobs AS j
    SET status = CASE WHEN e.unstarted THEN CASE WHEN j.attempts > 1 THEN 'retrying'
                                                 ELSE 'pending' END
                      WHEN j.attempts >= j.max_attempts THEN 'dead' ELSE 'retrying' END,
        attempts = j.attempts - CASE WHEN e.unstarted THEN 1 ELSE 0 END,
        unstarted_expiries = j.unstarted_expiries + CASE WHEN e.unstarted THEN 1 ELSE 0 END,
        -- Back at the front, not behind the backlog: the job keeps the run_at it was claimed
        -- with (it was at the head of its queue then), never later than now.
        run_at = least(j.run_at, coalesce(%(now)s::timestamptz, now())),
        locked_at = NULL,
        locked_by = NULL,
        locked_until = NULL,
        last_error_code = CASE WHEN e.unstarted THEN j.last_error_code
                               WHEN e.unmarked THEN 'crash_loop' ELSE 'lease_expired' END,
        last_error_summary = CASE
            WHEN e.unstarted THEN j.last_error_summary
            WHEN e.unmarked THEN left('lease of ' || coalesce(e.locked_by, '?') || ' expired at '
                                      || e.locked_until::text || ', the '
                                      || (j.unstarted_expiries + 1)::text
                                      || 'th time in a row before the job was reported started:'
                                      || ' it may kill its worker', 1000)
            ELSE left('lease of ' || coalesce(e.locked_by, '?') || ' expired at '
                      || e.locked_until::text, 1000) END,
        completed_at = CASE WHEN NOT e.unstarted AND j.attempts >= j.max_attempts
                            THEN coalesce(%(now)s::timestamptz, now()) END,
        lease_token = j.lease_token + 1
    FROM expired AS e
    WHERE j.id = ANY(ARRAY(SELECT id FROM expired)) AND j.id = e.id
    RETURNING j.id, j.attempts, j.queue, j.job_type, j.status, e.unstarted,
              j.last_error_code
),
history AS (
    INSERT INTO job_attempts (job_id, attempt, queue, job_type, worker, started_at,
                              finished_at, outcome, error_code, error_summary)
    SELECT u.id, u.attempts, u.queue, u.job_type, e.locked_by, e.locked_at,
           coalesce(%(now)s::timestamptz, now()), 'lease_expired', u.last_error_code,
           'lease expired at ' || e.locked_until::text
    FROM updated AS u JOIN expired AS e ON e.id = u.id
    WHERE NOT u.unstarted
)
SELECT u.id, u.queue, u.status FROM updated AS u;

-- name: job_release
-- Give leases back on shutdown: the jobs are ready again at once, and the interrupted attempt
-- is recorded. The attempt still counts, so a job that never finishes within the grace period
-- cannot loop forever. Like a reaped job, it goes back to the front (its own run_at).
WITH input AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[]) AS t(id, token)
),
updated AS (
    UPDATE jobs AS j
    SET status = 'retrying',
        run_at = least(j.run_at, coalesce(%(now)s::timestamptz, now())),
        locked_at = NULL,
        locked_by = NULL,
        locked_until = NULL,
        last_error_code = 'interrupted',
        last_error_summary = 'worker stopped before the handler finished',
        lease_token = j.lease_token + 1
    FROM input AS i
    WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = i.id AND j.lease_token = i.token
    RETURNING j.id, j.attempts, j.queue, j.job_type
),
history AS (
    INSERT INTO job_attempts (job_id, attempt, queue, job_type, worker, finished_at, outcome,
                              error_code, error_summary)
    SELECT u.id, u.attempts, u.queue, u.job_type, %(worker)s,
           coalesce(%(now)s::timestamptz, now()), 'interrupted', 'interrupted',
           'worker stopped before the handler finished'
    FROM updated AS u
)
SELECT id, queue FROM updated;

-- name: job_release_unstarted
-- Give back leases of jobs claimed ahead that never started (a worker stopping): ready again
-- as if never claimed, the claim's attempt given back and no attempt row written (the job did
-- not run). The token is still bumped: every end of a lease bumps it.
UPDATE jobs AS j
SET status = CASE WHEN j.attempts > 1 THEN 'retrying' ELSE 'pending' END,
    attempts = j.attempts - 1,
    locked_at = NULL,
    locked_by = NULL,
    locked_until = NULL,
    lease_token = j.lease_token + 1
FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[]) AS t(id, token)
WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = t.id AND j.lease_token = t.token
RETURNING j.id;

-- fragment: job_selected
-- An operator's selection of jobs (jobs/admin.py: requeue, cancel): by ids, queue, job type and
-- error code, each ignored when NULL. Written once for the statements that act on one
-- selection in jobs and in job_history.
(%(ids)b::bigint[] IS NULL OR id = ANY(%(ids)b::bigint[]))
AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)

-- fragment: job_selected_window
-- The selection's window on when the jobs ended (since inclusive, until exclusive).
(%(since)s::timestamptz IS NULL OR completed_at >= %(since)s::timestamptz)
AND (%(until)s::timestamptz IS NULL OR completed_at < %(until)s::timestamptz)

-- name: job_history_restore
-- The first statement of a requeue of cancelled or expired jobs (jobs/admin.py): those the
-- selection names move back from job_history into jobs, as they were, so that job_requeue_lock
-- and job_requeue find them there (a finished job is requeued like a dead one).
WITH back AS (
    DELETE FROM job_history
    WHERE status = ANY(%(statuses)b::text[])
      AND {{job_selected}} AND {{job_selected_window}}
    RETURNING {{job_history_columns}}
)
INSERT INTO jobs ({{job_history_columns}})
SELECT * FROM back;

-- name: job_requeue_lock
-- The dead (or cancelled, or expired) jobs a requeue selects, locked: the first statement of a requeue, so
-- the caller's transaction is open before job_requeue's savepoint (jobs/admin.py).
SELECT id FROM jobs
WHERE status = ANY(%(statuses)b::text[])
  AND {{job_selected}} AND {{job_selected_window}}
ORDER BY id
FOR UPDATE;

-- name: job_requeue
-- Those jobs (still in those statuses) back to pending with a fresh set of attempts. Their
-- history stays. A job with a unique key is skipped (left as it is, returned with skipped)
-- when an active job holds its key (jobs_unique_active_uq would refuse it), or when an older
-- job of the same selection has the key (the oldest is requeued). An active holder committed
-- by a concurrent transaction after this statement's snapshot makes it fail on the index
-- instead; the caller rolls back to its savepoint and runs it again, and the fresh snapshot
-- sees the holder.
WITH candidates AS (
    SELECT id, job_type, unique_key, organization_id
    FROM jobs
    WHERE id = ANY(%(ids)b::bigint[]) AND status = ANY(%(statuses)b::text[])
),
judged AS (
    SELECT c.id,
           c.unique_key IS NOT NULL
           AND (row_number() OVER (PARTITION BY c.job_type, c.unique_key, c.organization_id
                                   ORDER BY c.id) > 1
                OR EXISTS (SELECT 1 FROM jobs AS a
                           WHERE a.job_type = c.job_type AND a.unique_key = c.unique_key
                             AND a.organization_id IS NOT DISTINCT FROM c.organization_id
                             AND a.status IN ('pending', 'retrying', 'leased'))) AS skipped
    FROM candidates AS c
),
updated AS (
    UPDATE jobs
    SET status = 'pending',
        attempts = 0,
        run_at = coalesce(%(now)s::timestamptz, now()),
        completed_at = NULL,
        expires_at = NULL  -- an operator asked for it to run now: no lateness limit any more
    WHERE id = ANY(ARRAY(SELECT id FROM judged WHERE NOT skipped))
    RETURNING id, queue
),
wake AS (SELECT DISTINCT queue FROM updated)
SELECT u.id, false AS skipped,
       (SELECT count(pg_notify('tockwork_jobs', wake.queue)) FROM wake) AS notified
FROM updated AS u
UNION ALL
SELECT id, true, 0 FROM judged WHERE skipped
ORDER BY 1;

-- name: job_cancel
-- Cancel waiting, dead or expired jobs. A leased job is running right now and cannot be
-- cancelled here; its handler decides (raise jobs.Cancel). A job cancelled in jobs moves to
-- job_history; an expired one already there is relabelled (moving to the day it is cancelled).
WITH ended AS (
    DELETE FROM jobs
    WHERE status = ANY(%(statuses)b::text[])
      AND {{job_selected}}
    RETURNING id, organization_id, queue, job_type, payload, idempotency_key,
              'cancelled'::text, priority, run_at, attempts, max_attempts, locked_at,
              locked_by, locked_until, lease_token,
              coalesce(%(reason)s::text, last_error_code), last_error_summary,
              coalesce(%(now)s::timestamptz, now()), created_at, claim_id, started_token,
              unstarted_expiries, concurrency_key, trace_parent, trace_state, unique_key,
              heartbeat_at, expires_at
),
moved AS (
    INSERT INTO job_history ({{job_history_columns}})
    SELECT * FROM ended
),
relabelled AS (
    UPDATE job_history
    SET status = 'cancelled',
        completed_at = coalesce(%(now)s::timestamptz, now()),
        last_error_code = coalesce(%(reason)s::text, last_error_code)
    WHERE status = 'expired' AND 'expired' = ANY(%(statuses)b::text[])
      AND {{job_selected}}
    RETURNING id
)
SELECT id FROM ended
UNION ALL
SELECT id FROM relabelled;

-- name: job_list
SELECT id, organization_id, queue, job_type, payload, idempotency_key, status, priority, run_at,
       attempts, max_attempts, locked_by, locked_until, lease_token, last_error_code,
       last_error_summary, completed_at, created_at, unique_key, concurrency_key, expires_at
FROM jobs_all
WHERE status = ANY(%(statuses)b::text[])
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)
  AND (%(after)s::bigint IS NULL OR id > %(after)s::bigint)
ORDER BY id
LIMIT %(limit)s;

-- name: job_get
SELECT id, organization_id, queue, job_type, payload, idempotency_key, status, priority, run_at,
       attempts, max_attempts, locked_by, locked_until, lease_token, last_error_code,
       last_error_summary, completed_at, created_at, unique_key, concurrency_key, expires_at
FROM jobs_all WHERE id = %(id)s;

-- name: job_queue_stats
-- One cheap pass over the unfinished rows (the partial indexes keep them few).
SELECT queue,
       count(*) FILTER (WHERE status IN ('pending', 'retrying')
                          AND run_at <= coalesce(%(now)s::timestamptz, now())) AS ready,
       coalesce(extract(epoch FROM coalesce(%(now)s::timestamptz, now())
                - min(run_at) FILTER (WHERE status IN ('pending', 'retrying')
                    AND run_at <= coalesce(%(now)s::timestamptz, now()))), 0)::float8
           AS oldest_ready_age,
       count(*) FILTER (WHERE status = 'leased') AS leased,
       count(*) FILTER (WHERE status = 'retrying') AS retrying,
       count(*) FILTER (WHERE status = 'dead') AS dead,
       count(*) FILTER (WHERE status IN ('pending', 'retrying')
                          AND run_at > coalesce(%(now)s::timestamptz, now())) AS scheduled
FROM jobs
WHERE status IN ('pending', 'retrying', 'leased', 'dead')
GROUP BY queue
ORDER BY queue;

-- fragment: job_supersede_organization if not no_org
organization_id = %(organization_id)s::uuid

-- fragment: job_supersede_organization if no_org
organization_id IS NULL

-- template: job_supersede_by_keys (no_org)
-- variant: job_supersede_by_keys
-- variant: job_supersede_by_keys_no_org   no_org
-- Cancel the waiting jobs that hold these idempotency keys and free the keys (renamed with a
-- suffix), so a replacement can be enqueued under the same key. Running jobs are left alone.
-- The organization is a plain equality (an index probe), or IS NULL for the jobs of none.
-- The cancelled jobs move to job_history, under their renamed key.
WITH ended AS (
    DELETE FROM jobs
    WHERE {{job_supersede_organization}}
      AND job_type = %(job_type)s
      AND idempotency_key = ANY(%(keys)b::text[])
      AND status IN ('pending', 'retrying')
    RETURNING id, organization_id, queue, job_type, payload, idempotency_key || %(suffix)s,
              'cancelled'::text, priority, run_at, attempts, max_attempts, locked_at,
              locked_by, locked_until, lease_token, %(reason)s::text, %(summary)s::text,
              coalesce(%(now)s::timestamptz, now()), created_at, claim_id, started_token,
              unstarted_expiries, concurrency_key, trace_parent, trace_state, unique_key,
              heartbeat_at, expires_at
)
INSERT INTO job_history ({{job_history_columns}})
SELECT * FROM ended
RETURNING id, idempotency_key;

-- fragment: job_next_due_scope
-- Only the jobs after now, in the loose scan too: the entries of the jobs that came due (in a
-- herd, claimed and not yet vacuumed away) come first in each priority, and a probe for the
-- first entry would visit each of their rows (an index condition skips them unread).
AND run_at > coalesce(%(now)s::timestamptz, now())

-- name: job_next_due
-- Seconds until the earliest waiting job of these queues becomes ready (NULL: none waits), so
-- an idle worker wakes when a scheduled job falls due rather than at its next poll. Per queue,
-- the priorities with waiting jobs (the claim's loose scan of the ready index), then each
-- one's first job after now: a few index probes. min(run_at) over the whole queue instead read
-- every future entry of the ready index (run_at comes after the priority in it): 2.5-4 ms an
-- idle poll with a herd of 30,000 enqueued ahead (docs/performance.md, issue 22's fourth pass).
SELECT extract(epoch FROM min(d.run_at) - coalesce(%(now)s::timestamptz, now()))::float8
FROM unnest(%(queues)s::text[]) AS w(queue)
CROSS JOIN LATERAL (
    WITH RECURSIVE {{job_ready_levels queue=w.queue scope=job_next_due_scope}}
    SELECT (SELECT f.run_at FROM jobs AS f
            WHERE f.queue = w.queue AND f.status IN ('pending', 'retrying')
              AND f.priority = l.priority
              AND f.run_at > coalesce(%(now)s::timestamptz, now())
            ORDER BY f.run_at LIMIT 1) AS run_at
    FROM levels AS l
    WHERE l.priority IS NOT NULL
) AS d;

-- name: job_allocate_ids
-- Ids for a batch of new jobs, and the database clock (the default run_at and created_at). The
-- sequence is looked up once (an InitPlan returning the regclass), not once per id: per row,
-- pg_get_serial_sequence and the text-to-regclass cast cost several times the nextval itself.
-- With it, the wake-ups of the batch's queues that have a job ready now (job_wake_queues'
-- NOTIFY, held by the caller's transaction until it commits, so sent before the rows exist
-- only when the caller is in a transaction: jobs/enqueue.py), saving a round trip per batch.
SELECT coalesce(%(now)s::timestamptz, now()),
       ARRAY(SELECT nextval((SELECT pg_get_serial_sequence('jobs', 'id')::regclass))
             FROM generate_series(1, %(n)s::int)),
       (SELECT count(pg_notify('tockwork_jobs', w.q))
        FROM unnest(%(wake)s::text[], %(wake_ats)s::timestamptz[]) AS w(q, at)
        WHERE w.at IS NULL OR w.at <= coalesce(%(now)s::timestamptz, now()));

-- fragment: job_copy_trace if traced
, trace_parent, trace_state

-- fragment: job_copy_expiry if expiring
, expires_at

-- template: job_copy (traced, expiring)
-- A batch in binary COPY format (the caller sets the column types): no text formatting of
-- timestamps, and heap_multi_insert writes whole pages. With idempotency keys it runs inside a
-- savepoint: a key already taken fails it with a unique violation on jobs_idempotency_uq, and
-- the caller falls back to job_enqueue_many. concurrency_key: NULL (4 bytes a row) unless set.
-- traced: the W3C trace context of a traced enqueue (jobs/tracing.py), the same for every row
-- of the batch; an untraced batch keeps job_copy or job_copy_defaults. expiring: some job of
-- the batch has a maximum lateness (its expires_at; a batch without one sends no column).
-- variant: job_copy
-- variant: job_copy_traced            traced
-- variant: job_copy_expiring          expiring
-- variant: job_copy_traced_expiring   traced expiring
COPY jobs (id, organization_id, queue, job_type, payload, idempotency_key, priority, run_at,
           max_attempts, concurrency_key, created_at{{job_copy_trace}}{{job_copy_expiry}})
FROM STDIN (FORMAT BINARY);

-- name: job_copy_defaults
-- A batch that leaves run_at, created_at (now() of this transaction), priority, max_attempts,
-- organization_id and concurrency_key to the table's defaults: the fewest columns to format
-- and parse.
COPY jobs (id, queue, job_type, payload, idempotency_key) FROM STDIN;

-- name: job_wake_queues
SELECT count(pg_notify('tockwork_jobs', q)) FROM unnest(%(queues)s::text[]) AS q;

-- name: job_delete_finished
-- Retention (jobs/maintenance.py): one bounded batch of the jobs that succeeded or were
-- cancelled (or expired) more than %(finished_age)s seconds ago. Dead jobs are kept until a person requeues
-- or cancels them, unless %(dead_age)s (seconds) is given. Ages are exact seconds
-- (make_interval(secs => ...)), so the session's time zone never stretches a day.
WITH doomed AS (
    SELECT id FROM jobs
    WHERE (status IN ('succeeded', 'cancelled', 'expired')
           AND completed_at < coalesce(%(now)s::timestamptz, now())
                              - make_interval(secs => %(finished_age)s::float8))
       OR (%(dead_age)s::float8 IS NOT NULL AND status = 'dead'
           AND completed_at < coalesce(%(now)s::timestamptz, now())
                              - make_interval(secs => %(dead_age)s::float8))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs WHERE id IN (SELECT id FROM doomed);
