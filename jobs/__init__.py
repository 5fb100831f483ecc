"""The durable jobs queue: transactional enqueue, leased claims, retries, dead letters.

``__all__`` is what applications call: enqueue, the worker and what a handler raises, batch
handlers, the admin calls, the relay and the outbox, rate limits and queue policies, effects,
typed jobs, metrics, tracing and maintenance, connections, the models and the errors. What the
``scheduler`` package (the composition root) needs beyond it is in :mod:`jobs.internal`, which
is not a stable API.
"""

import logging

from jobs import (
    effects,
    limits,
    maintenance,
    metrics,
    outbox,
    partitions,
    primary,
    processes,
    tracing,
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
)
from jobs.batch import Batch, BatchHandler, batch_handler, in_completion
from jobs.connection import connect, connect_kwargs, pooler_mode
from jobs.enqueue import enqueue, enqueue_async, enqueue_many, enqueue_many_async
from jobs.errors import (
    InvalidJob,
    JobNotFound,
    JobsError,
    MigrationError,
    SyncReplicationRequired,
)
from jobs.limits import RateLimit
from jobs.migrate import migrate
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
from jobs.relay import Relay, RelayConfig
from jobs.retry import RetryPolicies, RetryPolicy
from jobs.service import Reconnect, Service
from jobs.typed import JobDefinition, handlers, job
from jobs.worker import Handler, Worker, WorkerConfig, WorkerStats
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
    "Reconnect",
    "Relay",
    "RelayConfig",
    "Requeued",
    "Retry",
    "RetryPolicies",
    "RetryPolicy",
    "Service",
    "Snooze",
    "SyncReplicationRequired",
    "TockworkError",
    "TransientError",
    "Worker",
    "WorkerConfig",
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
    "maintenance",
    "metrics",
    "migrate",
    "outbox",
    "partitions",
    "pooler_mode",
    "primary",
    "processes",
    "queue_policies",
    "queue_stats",
    "queue_stats_async",
    "requeue",
    "requeue_async",
    "set_queue_policy",
    "supersede",
    "supersede_async",
    "tracing",
]
