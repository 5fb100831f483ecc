-- 0010: jobs.trace_parent and jobs.trace_state, the W3C trace context of the enqueue.

-- An enqueue inside a recording OpenTelemetry span (jobs/tracing.py) stores that span's
-- traceparent (and tracestate, when the trace has one); each attempt's execution span links to
-- it, so a trace from the request that enqueued the job leads to every run of it. NULL when no
-- span was recording: tracing off costs two null bits per row. Neither column is indexed.
ALTER TABLE jobs
    ADD COLUMN trace_parent text,
    ADD COLUMN trace_state text;
