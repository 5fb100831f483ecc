"""The durable jobs queue: transactional enqueue, leased claims, retries, dead letters."""

import logging

from jobs import (
    connection,
    effects,
    limits,
    logs,
    maintenance,
    metrics,
    outbox,
    queries,
    steps,
    tracing,
    validate,
)
from jobs.admin import (
    cancel,
    cancel_async,
    get_job,
    get_job_async,
    job_attempts,
    list_jobs,
    list_jobs_async,
    queue_stats,
    queue_stats_async,
    requeue,
    requeue_async,
    supersede,
    supersede_async,
    supersede_steps,
)
from jobs.batch import Batch, BatchHandler, batch_handler, in_completion
from jobs.connection import connect, connect_kwargs, pooler_mode
from jobs.enqueue import (
    enqueue,
    enqueue_async,
    enqueue_columns,
    enqueue_columns_async,
    enqueue_many,
    enqueue_many_async,
)
from jobs.errors import InvalidJob, JobNotFound, JobsError, MigrationError
from jobs.limits import RateLimit
from jobs.listener import CHANNEL as JOBS_CHANNEL
from jobs.metrics import Metrics
from jobs.migrate import migrate
from jobs.migrate import pending as pending_migrations
from jobs.model import (
    Attempt,
    Enqueued,
    Job,
    JobRecord,
    JobSpec,
    JobStatus,
    OnActive,
    QueuePolicy,
    QueueStats,
    Requeued,
)
from jobs.outcomes import (
    Cancel,
    HandlerOutcome,
    PermanentError,
    RateLimited,
    Retry,
    Snooze,
    TransientError,
)
from jobs.policy import (
    MAX_CONCURRENCY_PER_KEY,
    clear_queue_policy,
    queue_policies,
    set_queue_policy,
)
from jobs.relay import MAX_BATCH as RELAY_MAX_BATCH
from jobs.relay import Relay
from jobs.retry import RetryPolicies, RetryPolicy
from jobs.service import Reconnect, Service, default_name, stop_on_signals
from jobs.store import JobStore, PgJobStore
from jobs.typed import JobDefinition, handlers, job
from jobs.validate import DEFAULT_MAX_ATTEMPTS
from jobs.worker import Handler, Worker, WorkerStats
from timezones.errors import InvalidInput, TockworkError

# A library does not print: an application configures logging (or `tockwork worker` does).
logging.getLogger("tockwork").addHandler(logging.NullHandler())

__all__ = [
    "MAX_CONCURRENCY_PER_KEY",
    "Attempt",
    "Batch",
    "BatchHandler",
    "Cancel",
    "Enqueued",
    "Handler",
    "HandlerOutcome",
    "InvalidInput",
    "InvalidJob",
    "Job",
    "JobDefinition",
    "JobNotFound",
    "JobRecord",
    "JobSpec",
    "JobStatus",
    "JobsError",
    "MigrationError",
    "OnActive",
    "PermanentError",
    "QueuePolicy",
    "QueueStats",
    "RateLimit",
    "RateLimited",
    "Relay",
    "Requeued",
    "Retry",
    "RetryPolicies",
    "RetryPolicy",
    "Snooze",
    "TockworkError",
    "TransientError",
    "Worker",
    "WorkerStats",
    "batch_handler",
    "cancel",
    "cancel_async",
    "clear_queue_policy",
    "connect",
    "connect_kwargs",
    "effects",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "get_job",
    "get_job_async",
    "handlers",
    "in_completion",
    "job",
    "job_attempts",
    "limits",
    "list_jobs",
    "list_jobs_async",
    "migrate",
    "outbox",
    "queue_policies",
    "queue_stats",
    "queue_stats_async",
    "requeue",
    "requeue_async",
    "set_queue_policy",
]

# Advanced: the building blocks the scheduler (the composition root) is made of, public so that
# no package above reaches into jobs' internals. Stable like the rest, but most applications
# never need them: enqueue_columns skips validation (input validated earlier), supersede frees
# idempotency keys, and the modules hold the maintenance tasks over the queue's tables
# (maintenance), the service shape every long-running loop shares (Service, Reconnect), the
# Prometheus instruments and collector (metrics, Metrics), the pooler settings (connection,
# pooler_mode), the one SQL query loader (queries), the input validators (validate), the
# logging set-up (logs), the optional OpenTelemetry tracing (tracing: configure()) and the
# sync and async drivers of operations written as steps (steps; supersede_steps,
# effects.record_many_steps).
__all__ += [
    "DEFAULT_MAX_ATTEMPTS",
    "JOBS_CHANNEL",
    "RELAY_MAX_BATCH",
    "JobStore",
    "Metrics",
    "PgJobStore",
    "Reconnect",
    "Service",
    "connection",
    "default_name",
    "enqueue_columns",
    "enqueue_columns_async",
    "logs",
    "maintenance",
    "metrics",
    "pending_migrations",
    "pooler_mode",
    "queries",
    "steps",
    "stop_on_signals",
    "supersede",
    "supersede_async",
    "supersede_steps",
    "tracing",
    "validate",
]
