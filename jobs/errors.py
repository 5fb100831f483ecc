"""The jobs component's errors: one class per failure a caller can act on.

Every error derives from :class:`timezones.errors.TockworkError`; bad input derives from
:class:`timezones.errors.InvalidInput` (``field``, ``value``), which ``jobs`` re-exports.
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
