"""The retry policy's arithmetic and classification, with an injected random source."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import jobs
from jobs.model import Job, JobStatus
from jobs.retry import RetryPolicies, RetryPolicy, decide, summarize

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(attempt: int = 1, max_attempts: int = 10, job_type: str = "t", queue: str = "q") -> Job:
    return Job(1, queue, job_type, {}, attempt, max_attempts, None, None, 0, T0, T0, 1)


def test_backoff_doubles_from_base_and_is_capped() -> None:
    policy = RetryPolicy(base=timedelta(seconds=2), cap=timedelta(seconds=100), jitter=0.0)
    assert [policy.backoff(n).total_seconds() for n in range(1, 9)] == [
        2,
        4,
        8,
        16,
        32,
        64,
        100,
        100,
    ]


def test_backoff_exponent_stops_at_ten() -> None:
    policy = RetryPolicy(base=timedelta(seconds=1), cap=timedelta(days=10), jitter=0.0)
    assert policy.backoff(11) == timedelta(seconds=1024)
    assert policy.backoff(50) == timedelta(seconds=1024)


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 40.0), (1.0, 30.0), (0.5, 35.0)])
def test_jitter_uses_the_injected_random_source(draw: float, expected: float) -> None:
    policy = RetryPolicy(base=timedelta(seconds=10), jitter=0.25, random=lambda: draw)
    assert policy.backoff(3).total_seconds() == pytest.approx(expected)


def test_invalid_policies_are_refused() -> None:
    with pytest.raises(ValueError, match="jitter"):
        RetryPolicy(jitter=1.5)
    with pytest.raises(ValueError, match="backoff"):
        RetryPolicy(base=timedelta(0))


def test_policy_by_job_type_wins_over_queue() -> None:
    by_type, by_queue = RetryPolicy(max_unknown_attempts=7), RetryPolicy(max_unknown_attempts=5)
    policies = RetryPolicies(queues={"q": by_queue}, job_types={"t": by_type})
    assert policies.for_job(job()) is by_type
    assert policies.for_job(job(job_type="other")) is by_queue
    assert policies.for_job(job(job_type="other", queue="z")) is policies.default


def test_classification() -> None:
    p = RetryPolicy(base=timedelta(seconds=1), jitter=0.0)
    assert decide(job(), None, p).status is JobStatus.SUCCEEDED
    assert decide(job(), jobs.PermanentError("x"), p).status is JobStatus.DEAD
    assert decide(job(), jobs.Cancel("x"), p).status is JobStatus.CANCELLED
    snooze = decide(job(), jobs.Snooze(5), p)
    assert (snooze.status, snooze.attempt_delta, snooze.delay) == (
        JobStatus.PENDING,
        -1,
        timedelta(seconds=5),
    )
    assert decide(job(attempt=10), jobs.TransientError("x"), p).status is JobStatus.DEAD
    assert decide(job(attempt=9), jobs.TransientError("x"), p).status is JobStatus.RETRYING
    assert decide(job(attempt=3), RuntimeError("x"), p).status is JobStatus.DEAD
    assert decide(job(attempt=2), RuntimeError("x"), p).status is JobStatus.RETRYING


def test_negative_delays_are_refused() -> None:
    with pytest.raises(ValueError, match="after"):
        jobs.Retry(after=-1)
    with pytest.raises(ValueError, match="retry_after"):
        jobs.RateLimited(timedelta(seconds=-5))


def test_summary_is_bounded_to_one_kib() -> None:
    text = summarize(ValueError("é" * 5000))
    assert len(text.encode()) <= 1024
    assert text.startswith("ValueError: ")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (jobs.RateLimited(2), "RateLimited: rate limited, retry after 2s"),
        (jobs.RateLimited(timedelta(minutes=2)), "RateLimited: rate limited, retry after 120s"),
        (jobs.RateLimited(0.5), "RateLimited: rate limited, retry after 0.5s"),
        (jobs.RateLimited(), "RateLimited: rate limited, no retry-after hint"),
        (jobs.RateLimited(2, "quota of project p"), "RateLimited: quota of project p"),
        (jobs.Retry(after=60), "Retry: retry after 60s"),
        (jobs.Retry(), "Retry: retry"),
        (jobs.Snooze(300), "Snooze: snoozed for 300s"),
        (KeyError(), "KeyError"),
        (jobs.TransientError(), "TransientError"),
    ],
)
def test_a_summary_never_ends_in_an_empty_message(exc: BaseException, expected: str) -> None:
    """Issue 26: ``RateLimited(2)`` was logged and stored as ``RateLimited: `` (empty)."""
    assert summarize(exc) == expected


def test_a_rate_limited_answer_uses_no_attempt_within_rate_limited_for() -> None:
    """Invariant: a job whose attempts a run of 429s would use up is retried without using one
    while it is younger than ``rate_limited_for`` (its attempt's run_at minus its creation),
    even on its last attempt; past it, a 429 uses an attempt and the last one is dead."""
    p = RetryPolicy(base=timedelta(seconds=1), jitter=0.0, rate_limited_for=timedelta(hours=2))
    young = job(attempt=10)  # the last attempt, run_at == created_at
    d = decide(young, jobs.RateLimited(30), p)
    assert (d.status, d.attempt_delta, d.delay) == (
        JobStatus.RETRYING, -1, timedelta(seconds=30)
    )  # fmt: skip
    aged = Job(1, "q", "t", {}, 10, 10, None, None, 0, T0 + timedelta(hours=2), T0, 1)
    assert decide(aged, jobs.RateLimited(30), p).status is JobStatus.DEAD
    mid = Job(1, "q", "t", {}, 3, 10, None, None, 0, T0 + timedelta(hours=3), T0, 1)
    d = decide(mid, jobs.RateLimited(30), p)
    assert (d.status, d.attempt_delta) == (JobStatus.RETRYING, 0)
    # Zero restores counting every 429; other transient errors always use their attempt.
    always = RetryPolicy(rate_limited_for=timedelta(0))
    assert decide(young, jobs.RateLimited(30), always).status is JobStatus.DEAD
    assert decide(young, jobs.TransientError("x"), p).status is JobStatus.DEAD
    with pytest.raises(ValueError, match="rate_limited_for"):
        RetryPolicy(rate_limited_for=timedelta(seconds=-1))
