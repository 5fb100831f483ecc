-- 0007: job_rate_limits, global rate limits per queue or job type enforced by the claim.

-- Global rate limits (migration 0007): one row per limit, on a queue or on a job type, with
-- the state of its token buckets. The claim statement (job_claim) reads the rows that apply to
-- it, refills them by the time elapsed, starts at most the whole tokens they hold and takes
-- away what it started, all in the one statement: every worker on every host shares the same
-- buckets without a leader (jobs/limits.py, docs/jobs.md "Rate limits"). Each window's bucket
-- holds at most 5% of its limit (at least one token), so no window of its length sees more
-- than its limit plus that burst. paused_until: a handler's RateLimited paused the limit.
CREATE TABLE job_rate_limits (
    scope text NOT NULL,
    name text NOT NULL,
    per_second integer NOT NULL,
    per_minute integer,
    second_tokens double precision NOT NULL,
    minute_tokens double precision,
    refilled_at timestamptz NOT NULL,
    paused_until timestamptz,
    pause_on_rate_limited boolean NOT NULL DEFAULT true,
    source text NOT NULL DEFAULT 'api',
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, name),
    CONSTRAINT job_rate_limits_scope_check CHECK (scope IN ('queue', 'job_type')),
    CONSTRAINT job_rate_limits_name_check CHECK (
        CASE WHEN scope = 'queue' THEN name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'
             ELSE length(name) BETWEEN 1 AND 200 END
    ),
    CONSTRAINT job_rate_limits_rate_check CHECK (
        per_second >= 1 AND (per_minute IS NULL OR per_minute >= 1)
    ),
    CONSTRAINT job_rate_limits_minute_check CHECK ((per_minute IS NULL) = (minute_tokens IS NULL)),
    CONSTRAINT job_rate_limits_source_check CHECK (source IN ('api', 'definitions'))
);
