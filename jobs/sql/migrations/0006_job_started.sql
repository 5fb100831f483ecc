-- 0006: jobs.started_token and jobs.unstarted_expiries, so a crash does not use the attempts of
-- jobs that were claimed ahead and never started.

-- A worker claims jobs ahead of its threads. When it is killed, the reaper finds their leases
-- expired; before this migration each such expiry used an attempt, and with max_attempts = 1 the
-- job went dead without having run. The worker now marks the jobs its threads have started
-- (started_token = the lease token), piggybacked on its next claim or heartbeat; the reaper gives
-- the attempt back for a lease that was never marked, and counts such expiries in a row
-- (unstarted_expiries) so a job that kills its worker before the mark is sent cannot loop
-- forever: after 5 of them, an unmarked expiry uses its attempt (jobs/store.py,
-- UNSTARTED_EXPIRY_LIMIT). Neither column is indexed: the updates stay HOT.
ALTER TABLE jobs
    ADD COLUMN started_token bigint,
    ADD COLUMN unstarted_expiries smallint NOT NULL DEFAULT 0;
