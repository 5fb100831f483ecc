-- Named queries on the subject_deliveries table: the per-subject caps of reminders
-- (scheduler/delivery.py, SubjectCap), decided for a whole batch in two statements sent in one
-- pipeline with the batch's still-due read: no round trip per job.

-- name: subject_delivery_ensure
-- The rows of the batch's subjects (organization as the nil UUID when none), created empty
-- where missing, in key order, so that the admission that follows can lock each one.
INSERT INTO subject_deliveries (organization_id, subject, updated_at)
SELECT DISTINCT o, s, %(now)s::timestamptz
FROM unnest(%(organization_ids)b::uuid[], %(subjects)b::text[]) AS t(o, s)
ORDER BY o, s
ON CONFLICT (organization_id, subject) DO NOTHING;

-- name: subject_delivery_admit
-- Admit the batch's candidate deliveries (job_ids with their subjects, in occurrence order)
-- under a cap of max_deliveries per subject in any window of window_seconds ending now: a job
-- already counted in its subject's window is admitted again (a retry; it does not count
-- twice), then the others in order while the subject's count stays within the cap. The
-- subjects' rows are locked in key order (replicas admitting the same subjects take turns),
-- pruned of what left the window, and given the newly admitted jobs. Returns each job id with
-- whether it was admitted and the subject's count in the window before this batch.
WITH input AS (
    SELECT *
    FROM unnest(%(job_ids)b::bigint[], %(organization_ids)b::uuid[], %(subjects)b::text[])
         WITH ORDINALITY AS t(job_id, organization_id, subject, ord)
),
locked AS MATERIALIZED (
    SELECT d.organization_id, d.subject, d.recent_job_ids, d.recent_at
    FROM subject_deliveries AS d
    WHERE (d.organization_id, d.subject) IN (SELECT organization_id, subject FROM input)
    ORDER BY d.organization_id, d.subject
    FOR UPDATE
),
kept AS (
    SELECT l.organization_id, l.subject, r.job_id, r.at
    FROM locked AS l, unnest(l.recent_job_ids, l.recent_at) AS r(job_id, at)
    WHERE r.at > coalesce(%(now)s::timestamptz, now())
                 - make_interval(secs => %(window_seconds)s::float8)
),
used AS (
    SELECT organization_id, subject, count(*) AS n FROM kept GROUP BY 1, 2
),
judged AS (
    SELECT i.job_id, i.organization_id, i.subject, i.ord,
           EXISTS (SELECT 1 FROM kept AS k
                   WHERE k.organization_id = i.organization_id AND k.subject = i.subject
                     AND k.job_id = i.job_id) AS counted,
           coalesce(u.n, 0) AS used
    FROM input AS i
    LEFT JOIN used AS u ON u.organization_id = i.organization_id AND u.subject = i.subject
),
decided AS (
    SELECT j.*,
           j.counted
           OR j.used + row_number() OVER (PARTITION BY j.organization_id, j.subject, j.counted
                                          ORDER BY j.ord) <= %(max_deliveries)s AS admitted
    FROM judged AS j
),
entries AS (
    SELECT organization_id, subject, job_id, at FROM kept
    UNION ALL
    SELECT organization_id, subject, job_id, coalesce(%(now)s::timestamptz, now())
    FROM decided WHERE admitted AND NOT counted
),
updated AS (
    UPDATE subject_deliveries AS d
    SET recent_job_ids = ARRAY(SELECT e.job_id FROM entries AS e
                               WHERE e.organization_id = d.organization_id
                                 AND e.subject = d.subject
                               ORDER BY e.at, e.job_id),
        recent_at = ARRAY(SELECT e.at FROM entries AS e
                          WHERE e.organization_id = d.organization_id AND e.subject = d.subject
                          ORDER BY e.at, e.job_id),
        updated_at = coalesce(%(now)s::timestamptz, now())
    FROM locked AS l
    WHERE d.organization_id = l.organization_id AND d.subject = l.subject
)
SELECT job_id, admitted, used FROM decided ORDER BY ord;
