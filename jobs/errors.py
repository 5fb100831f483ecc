"""The jobs component's errors: one class per failure a caller can act on.

Every error derives from :class:`timezones.errors.TockworkError`; bad input derives from
:class:`timezones.errors.InvalidInput` (``field``, ``value``), which ``jobs`` re-exports. A class
that callers used to catch by a built-in class keeps it as a second base
(``ServiceAlreadyRunning`` is a :class:`RuntimeError`). The handler outcomes
(:mod:`jobs.outcomes`) derive from :class:`JobsError` too.
"""

from __future__ import annotations

from timezones.errors import InvalidInput, TockworkError


class JobsError(TockworkError):
    """Base class of every error raised by ``jobs``."""


class InvalidJob(JobsError, InvalidInput):
    """An argument of an enqueue or admin call is invalid; nothing was written.

    ``field`` names the argument and ``value`` holds what was given.
    """


class JobNotFound(JobsError, LookupError):
    """No job has the given id."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id}")


class MigrationError(JobsError):
    """The database schema could not be brought up to date."""


class NotInHandler(JobsError, RuntimeError):
    """:func:`jobs.in_completion` was called outside a single-job handler."""


class EffectLeftTransactionInError(JobsError):
    """A completion effect swallowed a database error; its savepoint is rolled back."""


class ServiceAlreadyRunning(JobsError, RuntimeError):
    """A long-running service (worker, relay, scheduler) was run while it already runs."""


class ProjectionError(JobsError):
    """A relay's projection returned something that is not a job spec."""


class SyncReplicationRequired(InvalidJob):
    """Synchronous replication is required (``require_sync_replication``) and the primary does
    not replicate synchronously: the service refuses to start (jobs/primary.py)."""
