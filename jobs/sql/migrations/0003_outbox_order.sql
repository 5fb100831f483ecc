-- 0003: the outbox's per-aggregate order is the commit order, one claim per aggregate (issue 15).

-- Claim order was (occurred_at, seq), and occurred_at defaults to now(), the start of the
-- recording transaction: of two transactions that serialise on an aggregate, the one that began
-- first but committed second carried the earlier occurred_at and was projected first. seq alone
-- is the order now: it is drawn when the event is inserted, which for a transaction that holds
-- the aggregate's lock is after every earlier holder committed.
DROP INDEX outbox_pending_idx;
DROP INDEX outbox_aggregate_pending_idx;

CREATE INDEX outbox_pending_idx ON outbox_events (seq)
    WHERE processed_at IS NULL AND dead_at IS NULL;

CREATE INDEX outbox_aggregate_pending_idx ON outbox_events (aggregate_type, aggregate_id, seq)
    WHERE processed_at IS NULL AND dead_at IS NULL;

-- The run of the relay that holds the claim: after a lost reply, a relay finds the events its
-- possibly-committed claim leased by this id (claimed_by is the relay's name, shared by its runs).
ALTER TABLE outbox_events ADD COLUMN claim_id uuid;

-- Before this migration two events of one aggregate could be claimed at once; keep the earliest
-- claim of each aggregate and release the others (their holders are fenced by attempts if a
-- relay claims them again), so that the unique index below can be built.
UPDATE outbox_events AS o
SET claimed_at = NULL, claimed_by = NULL
WHERE o.claimed_at IS NOT NULL AND o.processed_at IS NULL AND o.dead_at IS NULL
  AND o.seq > (SELECT min(c.seq) FROM outbox_events AS c
               WHERE c.aggregate_type = o.aggregate_type AND c.aggregate_id = o.aggregate_id
                 AND c.claimed_at IS NOT NULL AND c.processed_at IS NULL AND c.dead_at IS NULL);

-- At most one claimed event per aggregate, across every relay: the claim query never tries a
-- second one, and this index makes a race between two claims fail instead of succeed.
CREATE UNIQUE INDEX outbox_aggregate_claimed_idx ON outbox_events (aggregate_type, aggregate_id)
    WHERE claimed_at IS NOT NULL AND processed_at IS NULL AND dead_at IS NULL;
