"""How a handler tells the worker what happened.

Returning normally means the job succeeded. Raising one of these classes chooses the outcome;
any other exception is an *unknown* error, retried a small number of times and then dead.

=====================  =============================================  ==================
raise                  meaning                                        job becomes
=====================  =============================================  ==================
``TransientError``     a dependency failed; worth retrying            retrying (backoff)
``Retry(after=None)``  retry, optionally after a given delay          retrying
``RateLimited(hint)``  the provider said "retry after"                retrying (hint,
                                                                      capped by policy)
``PermanentError``     retrying cannot help (invalid payload, token)  dead
``Cancel``             the work must not happen (authorization gone)  cancelled
``Snooze(delay)``      not yet; run later without using an attempt    pending
=====================  =============================================  ==================
"""

from __future__ import annotations

from datetime import timedelta

from jobs.errors import InvalidJob, JobsError


def _as_delay(value: timedelta | float | int | None, field: str) -> timedelta | None:
    if value is None:
        return None
    delay = value if isinstance(value, timedelta) else timedelta(seconds=float(value))
    if delay < timedelta(0):
        raise InvalidJob(field, value, "must not be negative")
    return delay


def _seconds(delay: timedelta) -> str:
    return f"{delay.total_seconds():g}s"


class HandlerOutcome(JobsError):
    """Base class of the exceptions a handler raises to choose its job's outcome.

    A :class:`jobs.JobsError` like every error of ``jobs`` (one root for all of Tockwork).
    """

    default_code = "error"

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code


class TransientError(HandlerOutcome):
    """A transient failure (network, timeout, 5xx): retry with exponential backoff and jitter."""

    default_code = "transient"


class Retry(TransientError):
    """Retry the job; after ``after`` when given, else by the backoff policy."""

    default_code = "retry"

    def __init__(
        self,
        message: str = "",
        *,
        after: timedelta | float | None = None,
        code: str | None = None,
    ) -> None:
        self.after = _as_delay(after, "after")
        # Issue 26: an empty message was logged as "Retry: " (and so for the two below).
        if not message:
            message = f"retry after {_seconds(self.after)}" if self.after is not None else "retry"
        super().__init__(message, code=code)


class RateLimited(TransientError):
    """The provider rate-limited us: retry after its hint (capped by the policy)."""

    default_code = "rate_limited"

    def __init__(
        self,
        retry_after: timedelta | float | None = None,
        message: str = "",
        *,
        code: str | None = None,
    ) -> None:
        self.retry_after = _as_delay(retry_after, "retry_after")
        if not message:
            message = (
                f"rate limited, retry after {_seconds(self.retry_after)}"
                if self.retry_after is not None
                else "rate limited, no retry-after hint"
            )
        super().__init__(message, code=code)


class PermanentError(HandlerOutcome):
    """Retrying cannot help (invalid payload, rejected token): the job is dead now."""

    default_code = "permanent"


class Cancel(HandlerOutcome):
    """The work must not happen (authorization revoked, superseded): the job is cancelled."""

    default_code = "cancelled"


class Snooze(HandlerOutcome):
    """Run the job again after ``delay`` without using an attempt."""

    default_code = "snoozed"

    def __init__(self, delay: timedelta | float, message: str = "") -> None:
        self.delay = _as_delay(delay, "delay") or timedelta(0)
        super().__init__(message or f"snoozed for {_seconds(self.delay)}", code=None)
