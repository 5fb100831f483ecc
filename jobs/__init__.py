"""The durable jobs queue: transactional enqueue, leased claims, retries, dead letters."""

import logging

from jobs import effects, outbox
from jobs.admin import cancel, get_job, job_attempts, list_jobs, queue_stats, requeue
from jobs.enqueue import enqueue, enqueue_async, enqueue_many
from jobs.errors import InvalidJob, JobNotFound, JobsError, MigrationError
from jobs.migrate import migrate
from jobs.model import Attempt, Enqueued, Job, JobRecord, JobSpec, JobStatus, QueueStats
from jobs.outcomes import (
    Cancel,
    HandlerOutcome,
    PermanentError,
    RateLimited,
    Retry,
    Snooze,
    TransientError,
)
from jobs.retry import RetryPolicies, RetryPolicy
from jobs.worker import Handler, Worker, WorkerStats
from timezones.errors import InvalidInput, TockworkError

# A library does not print: an application configures logging (or `tockwork worker` does).
logging.getLogger("tockwork").addHandler(logging.NullHandler())

__all__ = [
    "Attempt",
    "Cancel",
    "Enqueued",
    "Handler",
    "HandlerOutcome",
    "InvalidInput",
    "InvalidJob",
    "Job",
    "JobNotFound",
    "JobRecord",
    "JobSpec",
    "JobStatus",
    "JobsError",
    "MigrationError",
    "PermanentError",
    "QueueStats",
    "RateLimited",
    "Retry",
    "RetryPolicies",
    "RetryPolicy",
    "Snooze",
    "TockworkError",
    "TransientError",
    "Worker",
    "WorkerStats",
    "cancel",
    "effects",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "get_job",
    "job_attempts",
    "list_jobs",
    "migrate",
    "outbox",
    "queue_stats",
    "requeue",
]
