"""The jobs component's errors: one class per failure a caller can act on."""

from __future__ import annotations

from typing import Any


class JobsError(Exception):
    """Base class of every error raised by ``jobs``."""


class InvalidJob(JobsError, ValueError):
    """An argument of an enqueue or admin call is invalid; nothing was written.

    ``field`` names the argument and ``value`` holds what was given.
    """

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        shown = repr(value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        super().__init__(f"invalid {field} {shown}: {reason}")


class JobNotFound(JobsError, LookupError):
    """No job has the given id."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id}")


class MigrationError(JobsError):
    """The database schema could not be brought up to date."""
