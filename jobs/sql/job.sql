-- Named queries on the jobs table (and the attempt rows its writes record), loaded by
-- jobs/queries.py.
-- Every time predicate takes %(now)s and falls back to the database clock, so production has one
-- clock (the database's) and tests pin it.

-- name: job_enqueue
-- Insert one job; on an idempotency conflict insert nothing and return no row (the caller then
-- looks the existing job up). Wakes the queue's workers only when the job is ready now; NOTIFY
-- payloads are de-duplicated by PostgreSQL within a transaction, so a transaction that enqueues
-- many jobs on one queue sends one notification.
WITH ins AS (
    INSERT INTO jobs (organization_id, queue, job_type, payload, idempotency_key, priority,
                      run_at, max_attempts, created_at)
    VALUES (%(organization_id)s::uuid, %(queue)s, %(job_type)s, %(payload)s::jsonb,
            %(idempotency_key)s::text, %(priority)s,
            coalesce(%(run_at)s::timestamptz, %(now)s::timestamptz, now()), %(max_attempts)s,
            coalesce(%(now)s::timestamptz, now()))
    ON CONFLICT (organization_id, job_type, idempotency_key)
        WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, run_at
)
SELECT id,
       CASE WHEN run_at <= coalesce(%(now)s::timestamptz, now())
            THEN pg_notify('tockwork_jobs', %(queue)s) END IS NOT NULL AS notified
FROM ins;

-- name: job_find_by_key
SELECT id FROM jobs
WHERE organization_id = %(organization_id)s::uuid
  AND job_type = %(job_type)s AND idempotency_key = %(idempotency_key)s;

-- name: job_find_by_key_no_org
SELECT id FROM jobs
WHERE organization_id IS NULL
  AND job_type = %(job_type)s AND idempotency_key = %(idempotency_key)s;

-- name: job_enqueue_many
-- Insert many jobs in one statement, for a batch that may hit idempotency keys (within the batch
-- or in the table). The ids were drawn up front (job_allocate_ids), so every input row can be
-- matched to its job: a row whose id comes back was created, the others hit a key and are looked
-- up by the caller. Rows go in input order, so the first spec of a repeated key wins.
INSERT INTO jobs (id, organization_id, queue, job_type, payload, idempotency_key, priority,
                  run_at, max_attempts, created_at)
SELECT id, organization_id, queue, job_type, payload, idempotency_key, priority, run_at,
       max_attempts, %(created_at)s::timestamptz
FROM unnest(%(ids)b::bigint[], %(organization_ids)b::uuid[], %(queues)b::text[],
            %(job_types)b::text[], %(payloads)b::jsonb[], %(idempotency_keys)b::text[],
            %(priorities)b::int[], %(run_ats)b::timestamptz[], %(max_attempts)b::int[])
     WITH ORDINALITY
     AS t(id, organization_id, queue, job_type, payload, idempotency_key, priority, run_at,
          max_attempts, ord)
ORDER BY ord
ON CONFLICT (organization_id, job_type, idempotency_key)
    WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id;

-- name: job_find_many_by_key
SELECT k.ord, j.id
FROM unnest(%(organization_ids)b::uuid[], %(job_types)b::text[], %(idempotency_keys)b::text[])
     WITH ORDINALITY AS k(organization_id, job_type, idempotency_key, ord)
JOIN jobs AS j
  ON j.organization_id IS NOT DISTINCT FROM k.organization_id
 AND j.job_type = k.job_type AND j.idempotency_key = k.idempotency_key;

-- name: job_claim
-- Lease up to n ready jobs per queue in one short statement. SKIP LOCKED lets claimers pass
-- each other; every claim bumps the fencing token, so only the current holder can write the
-- outcome. The rows carry the caller's claim id, so a caller that lost the reply can find them
-- (job_claim_lookup).
WITH wanted AS (
    SELECT * FROM unnest(%(queues)b::text[], %(limits)b::int[]) AS w(queue, n)
),
candidates AS (
    SELECT c.id
    FROM wanted AS w
    CROSS JOIN LATERAL (
        SELECT id FROM jobs
        WHERE queue = w.queue
          AND status IN ('pending', 'retrying')
          AND run_at <= coalesce(%(now)s::timestamptz, now())
        ORDER BY priority DESC, run_at, id
        LIMIT w.n
        FOR UPDATE SKIP LOCKED
    ) AS c
)
UPDATE jobs AS j
SET status = 'leased',
    attempts = j.attempts + 1,
    locked_at = coalesce(%(now)s::timestamptz, now()),
    locked_by = %(worker)s,
    locked_until = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
    lease_token = j.lease_token + 1,
    claim_id = %(claim)s::uuid
-- ANY(ARRAY(...)) rather than a join: the planner cannot see the LIMIT inside the lateral
-- subquery, guesses thousands of rows and would hash-join over a scan of the whole table.
WHERE j.id = ANY(ARRAY(SELECT id FROM candidates))
RETURNING j.id, j.organization_id, j.queue, j.job_type, j.payload, j.idempotency_key,
          j.priority, j.run_at, j.attempts, j.max_attempts, j.lease_token, j.locked_at,
          j.created_at;

-- name: job_claim_lookup
-- After a lost reply (jobs/worker.py): the rows a claim leased that are still leased under it.
-- Every end of a lease changes the status and every new claim its id, so these are exactly the
-- leases the claim holds. Only leased rows are read (the partial jobs_leased_idx).
SELECT id, organization_id, queue, job_type, payload, idempotency_key, priority, run_at,
       attempts, max_attempts, lease_token, locked_at, created_at
FROM jobs
WHERE status = 'leased' AND claim_id = %(claim)s::uuid;

-- name: job_complete
-- Record the outcomes of a batch of attempts. A row is updated only while the caller still
-- holds its lease (same fencing token); an outcome that lost its lease is kept in the history
-- as 'fenced' and changes nothing else.
WITH input AS (
    SELECT *
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
        attempts = j.attempts + i.attempt_delta,
        unstarted_expiries = 0,  -- it ran: a run of unstarted expiries ends (job_reap)
        locked_at = NULL,
        locked_by = NULL,
        locked_until = NULL,
        last_error_code = coalesce(i.code, j.last_error_code),
        last_error_summary = coalesce(i.summary, j.last_error_summary),
        completed_at = CASE WHEN i.status IN ('succeeded', 'dead', 'cancelled')
                            THEN coalesce(%(now)s::timestamptz, now()) END,
        lease_token = j.lease_token + 1
    FROM input AS i
    -- Fencing: every change that ends a lease (complete, reap, release) bumps the token, so a
    -- matching token means "still leased by this claim". (A status = 'leased' test here would
    -- tempt the planner into scanning the partial leased index, dead entries included.)
    WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = i.id AND j.lease_token = i.token
    RETURNING j.id
)
INSERT INTO job_attempts (job_id, attempt, queue, job_type, worker, started_at, finished_at,
                          outcome, error_code, error_summary, duration_ms)
SELECT i.id, i.attempt, i.queue, i.job_type, %(worker)s, i.started_at,
       coalesce(%(now)s::timestamptz, now()),
       CASE WHEN u.id IS NULL THEN 'fenced' ELSE i.outcome END,
       i.code, i.summary, i.duration_ms
FROM input AS i LEFT JOIN updated AS u ON u.id = i.id
RETURNING job_id, outcome;

-- name: job_heartbeat
-- Extend the leases the caller still holds (same fencing token); the ids not returned were
-- lost: reaped, released, or taken over by another claim. The leases of the started ids are
-- also marked started (as job_mark_started does).
UPDATE jobs AS j
SET locked_until = coalesce(%(now)s::timestamptz, now()) + %(lease)s::interval,
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

-- name: job_requeue
-- Dead (or cancelled) jobs back to pending with a fresh set of attempts. Their history stays.
WITH updated AS (
    UPDATE jobs
    SET status = 'pending',
        attempts = 0,
        run_at = coalesce(%(now)s::timestamptz, now()),
        completed_at = NULL
    WHERE status = ANY(%(statuses)b::text[])
      AND (%(ids)b::bigint[] IS NULL OR id = ANY(%(ids)b::bigint[]))
      AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
      AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
      AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)
      AND (%(since)s::timestamptz IS NULL OR completed_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR completed_at < %(until)s::timestamptz)
    RETURNING id, queue
),
wake AS (SELECT DISTINCT queue FROM updated)
SELECT u.id, (SELECT count(pg_notify('tockwork_jobs', wake.queue)) FROM wake) AS notified
FROM updated AS u
ORDER BY u.id;

-- name: job_cancel
-- Cancel waiting or dead jobs. A leased job is running right now and cannot be cancelled here;
-- its handler decides (raise jobs.Cancel).
UPDATE jobs
SET status = 'cancelled',
    completed_at = coalesce(%(now)s::timestamptz, now()),
    last_error_code = coalesce(%(reason)s::text, last_error_code)
WHERE status = ANY(%(statuses)b::text[])
  AND (%(ids)b::bigint[] IS NULL OR id = ANY(%(ids)b::bigint[]))
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)
RETURNING id;

-- name: job_list
SELECT id, organization_id, queue, job_type, payload, idempotency_key, status, priority, run_at,
       attempts, max_attempts, locked_by, locked_until, lease_token, last_error_code,
       last_error_summary, completed_at, created_at
FROM jobs
WHERE status = ANY(%(statuses)b::text[])
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
  AND (%(error_code)s::text IS NULL OR last_error_code = %(error_code)s::text)
ORDER BY id
LIMIT %(limit)s;

-- name: job_get
SELECT id, organization_id, queue, job_type, payload, idempotency_key, status, priority, run_at,
       attempts, max_attempts, locked_by, locked_until, lease_token, last_error_code,
       last_error_summary, completed_at, created_at
FROM jobs WHERE id = %(id)s;

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

-- name: job_supersede_by_keys
-- Cancel the waiting jobs that hold these idempotency keys and free the keys (renamed with a
-- suffix), so a replacement can be enqueued under the same key. Running jobs are left alone.
UPDATE jobs
SET status = 'cancelled',
    idempotency_key = idempotency_key || %(suffix)s,
    last_error_code = %(reason)s,
    last_error_summary = %(summary)s,
    completed_at = coalesce(%(now)s::timestamptz, now())
WHERE organization_id = %(organization_id)s::uuid
  AND job_type = %(job_type)s
  AND idempotency_key = ANY(%(keys)b::text[])
  AND status IN ('pending', 'retrying')
RETURNING id, idempotency_key;

-- name: job_supersede_by_keys_no_org
UPDATE jobs
SET status = 'cancelled',
    idempotency_key = idempotency_key || %(suffix)s,
    last_error_code = %(reason)s,
    last_error_summary = %(summary)s,
    completed_at = coalesce(%(now)s::timestamptz, now())
WHERE organization_id IS NULL
  AND job_type = %(job_type)s
  AND idempotency_key = ANY(%(keys)b::text[])
  AND status IN ('pending', 'retrying')
RETURNING id, idempotency_key;

-- name: job_next_due
-- Seconds until the earliest waiting job of these queues becomes ready (NULL: none waits), so
-- an idle worker wakes when a scheduled job falls due rather than at its next poll.
SELECT extract(epoch FROM min(run_at) - coalesce(%(now)s::timestamptz, now()))::float8
FROM jobs
WHERE queue = ANY(%(queues)s::text[])
  AND status IN ('pending', 'retrying')
  AND run_at > coalesce(%(now)s::timestamptz, now());

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

-- name: job_copy
-- A batch in binary COPY format (the caller sets the column types): no text formatting of
-- timestamps, and heap_multi_insert writes whole pages. With idempotency keys it runs inside a
-- savepoint: a key already taken fails it with a unique violation on jobs_idempotency_uq, and
-- the caller falls back to job_enqueue_many.
COPY jobs (id, organization_id, queue, job_type, payload, idempotency_key, priority, run_at,
           max_attempts, created_at)
FROM STDIN (FORMAT BINARY);

-- name: job_copy_defaults
-- A batch that leaves run_at, created_at (now() of this transaction), priority, max_attempts
-- and organization_id to the table's defaults: the fewest columns to format and parse.
COPY jobs (id, queue, job_type, payload, idempotency_key) FROM STDIN;

-- name: job_wake_queues
SELECT count(pg_notify('tockwork_jobs', q)) FROM unnest(%(queues)s::text[]) AS q;

-- name: job_delete_finished
-- Retention (jobs/maintenance.py): one bounded batch of the jobs that succeeded or were
-- cancelled more than %(finished_age)s seconds ago. Dead jobs are kept until a person requeues
-- or cancels them, unless %(dead_age)s (seconds) is given. Ages are exact seconds
-- (make_interval(secs => ...)), so the session's time zone never stretches a day.
WITH doomed AS (
    SELECT id FROM jobs
    WHERE (status IN ('succeeded', 'cancelled')
           AND completed_at < coalesce(%(now)s::timestamptz, now())
                              - make_interval(secs => %(finished_age)s::float8))
       OR (%(dead_age)s::float8 IS NOT NULL AND status = 'dead'
           AND completed_at < coalesce(%(now)s::timestamptz, now())
                              - make_interval(secs => %(dead_age)s::float8))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs WHERE id IN (SELECT id FROM doomed);
