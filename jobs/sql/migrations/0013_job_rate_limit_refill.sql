-- 0013: the token-bucket arithmetic of rate limits in one pair of inlined SQL functions, and a
-- burst of 1% of a limit (it was 5%, open-coded in four statements: a sliding one-second window
-- of starts went 6% over the limit with it). Existing buckets fuller than the new burst are
-- capped at their next refill.

-- Rate-limit buckets (0013): the one place their arithmetic is written. A window's bucket
-- holds at most 1% of its limit, at least one token (the burst), and refills at its limit per
-- window. Plain IMMUTABLE sql expressions, so the planner inlines them into the statements
-- that call them (job_claim, job_claim_fair, job_rate_limit_*): no function call per row.
CREATE FUNCTION job_rate_limit_burst(per_window integer) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT greatest(1, per_window * 0.01)::double precision $$;

-- A bucket's tokens at ``as_of``: ``tokens`` as of ``since``, plus what ``per_window`` per
-- ``window_seconds`` refilled in between, capped at the burst; NULL without a limit for the
-- window (a NULL per_window).
CREATE FUNCTION job_rate_limit_refill(
    tokens double precision, per_window integer, window_seconds double precision,
    since timestamptz, as_of timestamptz
) RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN per_window IS NOT NULL
                THEN least(job_rate_limit_burst(per_window),
                           tokens + per_window / window_seconds
                                    * greatest(0, extract(epoch FROM as_of - since))::float8)
           END
$$;
