"""The retry policy: how a handler's outcome becomes the job's next state.

Backoff is ``base * 2**min(n, 10)`` where ``n`` counts the failed attempts before this one (so the
first retry waits ``base``), capped at ``cap``, then shortened by up to ``jitter`` of itself with an
injectable random source, so that a burst of failures does not retry in lockstep. Policies can
be set per queue and per job type (the job type wins).
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from jobs.errors import InvalidJob
from jobs.model import Job, JobStatus
from jobs.outcomes import Cancel, PermanentError, RateLimited, Retry, Snooze, TransientError
from jobs.redaction import redact

SUMMARY_BYTES = 1024
MAX_SHIFT = 10


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff and limits for one queue or job type."""

    base: timedelta = timedelta(seconds=2)
    cap: timedelta = timedelta(hours=1)
    jitter: float = 0.25
    # Errors the handler did not classify are retried at most this many attempts in all.
    max_unknown_attempts: int = 3
    # A provider's Retry-After hint is honoured up to this delay.
    rate_limit_cap: timedelta = timedelta(hours=1)
    # A rate-limited answer uses no attempt while the job is younger than this (from its
    # creation to the run_at of the attempt): a long run of 429s is the provider's pace, not a
    # failure, and must not kill the job. Past it, each one uses an attempt like any transient
    # failure, so a job rate-limited for ever still ends dead, with its error (zero: always).
    rate_limited_for: timedelta = timedelta(hours=24)
    random: Callable[[], float] = field(default=_random.random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.base <= timedelta(0) or self.cap < self.base:
            raise InvalidJob("backoff", (self.base, self.cap), "base must be > 0 and <= cap")
        if not 0.0 <= self.jitter <= 1.0:
            raise InvalidJob("jitter", self.jitter, "must be from 0 to 1")
        if self.max_unknown_attempts < 1:
            raise InvalidJob("max_unknown_attempts", self.max_unknown_attempts, "must be >= 1")
        if self.rate_limited_for < timedelta(0):
            raise InvalidJob("rate_limited_for", self.rate_limited_for, "must not be negative")

    def backoff(self, attempt: int) -> timedelta:
        """The delay after failed attempt number ``attempt`` (1-based)."""
        shift = min(max(attempt - 1, 0), MAX_SHIFT)
        delay = min(self.base * (1 << shift), self.cap)
        if self.jitter:
            delay = delay * (1.0 - self.jitter * self.random())
        return delay


@dataclass(frozen=True)
class RetryPolicies:
    """A default policy with overrides by queue and by job type."""

    default: RetryPolicy = field(default_factory=RetryPolicy)
    queues: Mapping[str, RetryPolicy] = field(default_factory=dict)
    job_types: Mapping[str, RetryPolicy] = field(default_factory=dict)

    def for_job(self, job: Job) -> RetryPolicy:
        return self.job_types.get(job.job_type) or self.queues.get(job.queue) or self.default


@dataclass(frozen=True, slots=True)
class Decision:
    """What to write for one finished attempt."""

    status: JobStatus
    outcome: str
    delay: timedelta = timedelta(0)
    attempt_delta: int = 0
    code: str | None = None
    summary: str | None = None


def summarize(exc: BaseException) -> str:
    """A bounded one-line summary of an error (the full traceback goes to the logs), its
    secrets masked (:func:`jobs.redaction.redact`): what the jobs table keeps is shown by the
    CLI and the dashboard."""
    message = redact(str(exc))
    # Without a message, the class alone (not "KeyError: ", issue 26).
    text = (f"{type(exc).__name__}: {message}" if message else type(exc).__name__).replace(
        "\n", " "
    )
    data = text.encode()
    if len(data) <= SUMMARY_BYTES:
        return text
    return data[: SUMMARY_BYTES - 3].decode(errors="ignore") + "..."


def _code(value: str) -> str:
    return value[:100]


SUCCEEDED = Decision(JobStatus.SUCCEEDED, "succeeded")
# Claimed after its expires_at: not run. The claim's attempt is given back (it did not run) and
# no attempt row is written (job_complete).
EXPIRED = Decision(
    JobStatus.EXPIRED,
    "expired",
    attempt_delta=-1,
    code="expired",
    summary="not started within its max_lateness: expired without running",
)


def decide(job: Job, exc: BaseException | None, policy: RetryPolicy) -> Decision:
    """Classify the outcome of one attempt of ``job`` (``exc`` is None on success)."""
    if exc is None:
        return SUCCEEDED
    summary = summarize(exc)
    exhausted = job.attempt >= job.max_attempts
    if isinstance(exc, Snooze):
        # Snoozing does not use an attempt: the claim's increment is taken back.
        return Decision(JobStatus.PENDING, "snoozed", exc.delay, -1, None, None)
    if isinstance(exc, Cancel):
        return Decision(JobStatus.CANCELLED, "cancelled", code=_code(exc.code), summary=summary)
    if isinstance(exc, PermanentError):
        return Decision(JobStatus.DEAD, "dead", code=_code(exc.code), summary=summary)
    if isinstance(exc, RateLimited):
        # Within rate_limited_for of its creation the answer takes its attempt back (as a
        # snooze does); the attempt's run_at, not a clock: the decision stays pure.
        free = job.run_at - job.created_at < policy.rate_limited_for
        if exhausted and not free:
            return Decision(JobStatus.DEAD, "dead", code=_code(exc.code), summary=summary)
        hint = exc.retry_after if exc.retry_after is not None else policy.backoff(job.attempt)
        delay = min(hint, policy.rate_limit_cap)
        back = -1 if free else 0
        return Decision(JobStatus.RETRYING, "rate_limited", delay, back, _code(exc.code), summary)
    if isinstance(exc, TransientError):
        if exhausted:
            return Decision(JobStatus.DEAD, "dead", code=_code(exc.code), summary=summary)
        after = exc.after if isinstance(exc, Retry) else None
        delay = after if after is not None else policy.backoff(job.attempt)
        return Decision(JobStatus.RETRYING, "retry", delay, 0, _code(exc.code), summary)
    code = _code(f"unknown.{type(exc).__name__}")
    if exhausted or job.attempt >= policy.max_unknown_attempts:
        return Decision(JobStatus.DEAD, "dead", code=code, summary=summary)
    return Decision(JobStatus.RETRYING, "retry", policy.backoff(job.attempt), 0, code, summary)
