"""Batch runs without a database: outcomes per job, bisection of a failed run, effects per run."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs.batch import Batch, BatchHandler, batch_handler, rerun_budget, run_batch
from jobs.model import Job, JobStatus
from jobs.retry import RetryPolicies, RetryPolicy

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = RetryPolicies(default=RetryPolicy(base=timedelta(seconds=10), jitter=0.0))


def make_jobs(n: int, *, attempt: int = 1, max_attempts: int = 10) -> list[Job]:
    return [
        Job(i, "q", "t", {"i": i}, attempt, max_attempts, None, None, 0, T0, T0, 1)
        for i in range(1, n + 1)
    ]


def ticks() -> Any:
    """A monotonic clock that advances one millisecond per reading."""
    counter = itertools.count()
    return lambda: next(counter) / 1000.0


def test_a_poison_job_is_isolated_within_the_bound_and_the_others_succeed() -> None:
    """In a batch of n with one bad job, n - 1 succeed and the bad one alone gets the
    exception's outcome, in at most 2 * ceil(log2 n) re-runs."""
    for n, poison in ((500, 317), (2, 1), (7, 7), (64, 1)):
        calls: list[int] = []

        def handler(batch: Batch, poison: int = poison, calls: list[int] = calls) -> None:
            calls.append(len(batch))
            if any(j.id == poison for j in batch.jobs):
                raise ValueError("bad payload")

        result = run_batch(handler, make_jobs(n), POLICY, ticks())
        statuses = {d.job.id: d.decision.status for d in result.decided}
        assert statuses.pop(poison) is JobStatus.RETRYING
        assert set(statuses.values()) == {JobStatus.SUCCEEDED}
        (bad,) = [d for d in result.decided if d.job.id == poison]
        assert bad.decision.code == "unknown.ValueError"
        assert result.runs - 1 <= rerun_budget(n) == 2 * math.ceil(math.log2(n))
        assert len(calls) == result.runs
        assert calls[0] == n


def test_decided_jobs_keep_their_outcome_when_the_run_raises() -> None:
    js = make_jobs(4)

    def handler(batch: Batch) -> None:
        if len(batch) == 4:
            batch.fail(js[0], "rejected token", code="invalid_token")
            batch.succeed(js[1])
        raise RuntimeError("crash after deciding two")

    result = run_batch(handler, js, POLICY, ticks())
    codes = [(d.decision.status, d.decision.code) for d in result.decided]
    assert codes == [
        (JobStatus.DEAD, "invalid_token"),
        (JobStatus.SUCCEEDED, None),
        (JobStatus.RETRYING, "unknown.RuntimeError"),
        (JobStatus.RETRYING, "unknown.RuntimeError"),
    ]
    # The two undecided jobs were re-run alone (each raised again), the decided ones never.
    assert result.runs == 3


def test_a_transient_failure_of_the_whole_batch_is_not_bisected() -> None:
    calls: list[int] = []

    def handler(batch: Batch) -> None:
        calls.append(len(batch))
        raise jobs.RateLimited(timedelta(seconds=30), "provider says slow down")

    result = run_batch(handler, make_jobs(100), POLICY, ticks())
    assert calls == [100]
    assert {(d.decision.status, d.decision.delay) for d in result.decided} == {
        (JobStatus.RETRYING, timedelta(seconds=30))
    }


def test_a_transient_failure_that_would_kill_a_job_is_bisected() -> None:
    """On its last attempt a transient error is dead: then a poison job must not drag the
    others there, so the batch is bisected as for any other error."""
    js = make_jobs(8, attempt=3, max_attempts=3)

    def handler(batch: Batch) -> None:
        if any(j.id == 5 for j in batch.jobs):
            raise jobs.TransientError("upstream timeout")

    result = run_batch(handler, js, POLICY, ticks())
    dead = [d.job.id for d in result.decided if d.decision.status is JobStatus.DEAD]
    assert dead == [5]


def test_effects_receive_the_jobs_their_run_decided() -> None:
    js = make_jobs(4)
    seen: list[tuple[int, ...]] = []

    def handler(batch: Batch) -> None:
        batch.in_completion(lambda _conn, done: seen.append(tuple(j.id for j in done)))
        if len(batch) == 4:
            batch.succeed(js[0])
            raise ValueError("poison somewhere")
        if any(j.id == 4 for j in batch.jobs):
            raise ValueError("poison")

    result = run_batch(handler, js, POLICY, ticks())
    assert [d.job.id for d in result.decided if d.decision.status is JobStatus.SUCCEEDED] == [
        1,
        2,
        3,
    ]
    conn: psycopg.Connection[Any] = None  # type: ignore[assignment]  # effects ignore it
    for run in result.effects:
        for fn in run.fns:
            fn(conn, run.jobs)
    # Each run's effects get the jobs that run decided, never a job twice: the first run
    # decided job 1 before raising; the re-run [2] decided 2, [3] decided 3; [4] none.
    assert sorted(seen) == [(1,), (2,), (3,)]


def test_the_last_decision_for_a_job_wins_and_foreign_jobs_are_refused() -> None:
    js = make_jobs(2)
    other = make_jobs(3)[2]

    def handler(batch: Batch) -> None:
        batch.fail(js[0], "no")
        batch.succeed(js[0])
        batch.snooze(js[1], timedelta(minutes=5))
        assert batch.undecided() == []
        with pytest.raises(jobs.InvalidJob):
            batch.succeed(other)

    result = run_batch(handler, js, POLICY, ticks())
    assert [d.decision.outcome for d in result.decided] == ["succeeded", "snoozed"]


def test_batch_handler_decorator_and_validation() -> None:
    @batch_handler
    def plain(batch: Batch) -> None:
        """Docs."""

    @batch_handler(max_batch=7)
    def small(batch: Batch) -> None:
        pass

    assert isinstance(plain, BatchHandler) and plain.max_batch == 500
    assert plain.__doc__ == "Docs."
    assert small.max_batch == 7
    for bad in (0, 10_001, True, "5"):
        with pytest.raises(jobs.InvalidJob):
            batch_handler(max_batch=bad)  # type: ignore[arg-type]


def test_in_completion_outside_a_single_handler_is_refused() -> None:
    with pytest.raises(jobs.JobsError, match="inside a single-job handler"):
        jobs.in_completion(lambda _conn: None)


def test_effects_of_a_run_with_no_decided_job_are_dropped() -> None:
    def handler(batch: Batch) -> None:
        batch.in_completion(_never)
        raise ValueError("all bad")

    result = run_batch(handler, make_jobs(1), POLICY, ticks())
    assert result.effects == []


def _never(_conn: psycopg.Connection[Any], _jobs: Sequence[Job]) -> None:
    raise AssertionError("not called")
