-- 0015: jobs pages half empty when filled (fillfactor 50, from 70). Every job is inserted, then
-- updated twice soon after (claim, outcome), and neither update is HOT (the status is in the
-- partial indexes' predicates), so each writes a whole new version of the row. With 30% of a
-- page free, most second versions found no room on the row's page: the update went to another
-- page, logged in full and with an extra lock record (bench/reminder_delivery.py, issue 22:
-- 975 bytes of WAL per job for the two updates at 70, 730 at 50, 707 at 40; 20,000 jobs).
-- Only pages filled from now on are affected; the table ends a lifecycle no larger than at 70
-- (the moved versions extended it).
ALTER TABLE jobs SET (fillfactor = 50);
