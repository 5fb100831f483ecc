-- 0004: jobs.claim_id, the claim that leased a row.

-- A worker whose connection dies while its claim commits cannot tell "claimed nothing" from
-- "leased jobs 76 and 79": the reply is lost either way. Each claim therefore stamps the rows it
-- leases with an id the worker chose before sending it; after reconnecting, the worker looks up
-- the rows still leased under that id and runs them (jobs/worker.py, lost replies). A row keeps
-- the id of its last claim; only rows with status 'leased' are looked up, and those are few.
ALTER TABLE jobs ADD COLUMN claim_id uuid;
