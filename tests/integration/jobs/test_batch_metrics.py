"""The worker's metrics of batch handlers: a batch whose jobs all succeeded is counted at once
(jobs/worker.py's settle), and what it exposes must be exactly what one observation and one
count per job expose: the execution-time histogram's buckets, count and sum, in the order the
jobs finished, and the outcome counters by the outcome written, also where a job of a quiet
batch was fenced or its completion effect failed (the outcome written is then not the one the
handler decided)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry, generate_latest

import jobs
from jobs import Batch, Job, JobSpec, RetryPolicies, RetryPolicy, Worker, batch_handler
from jobs.metrics import Metrics
from jobs.retry import Decision
from jobs.store import PgJobStore
from timezones.clock import FrozenClock

T0 = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)
POLICY = RetryPolicies(default=RetryPolicy(base=timedelta(seconds=10), jitter=0.0))
HISTOGRAM = "tockwork_job_execution_duration_seconds"
OUTCOMES = "tockwork_job_outcomes_total"


def series(registry: CollectorRegistry, name: str) -> list[str]:
    """The exposition's lines of ``name``, but the _created ones (the instant each labelled
    child was created: the two registries' differ)."""
    text = generate_latest(registry).decode()
    return sorted(
        line for line in text.splitlines() if line.startswith(name) and "_created" not in line
    )


def test_batches_expose_what_one_observation_per_job_exposes(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    specs = [JobSpec("send", {"n": n}) for n in range(100)]
    ids = [e.id for e in jobs.enqueue_many(conn, specs, now=T0)]
    conn.commit()
    # Batches of 40 in claim order: ids[0:40] quiet but one job fenced, ids[40:80] with one
    # retry (not quiet), ids[80:100] quiet but their completion effect fails (all retried);
    # then the fenced job alone, claimed again (the reaper made it ready at T0).
    fenced, retried, effect_failed = ids[5], ids[45], ids[80]

    def fail(_conn: psycopg.Connection[Any], _done: Sequence[Job]) -> None:
        raise RuntimeError("the effect failed")

    taken_back: list[int] = []

    @batch_handler(max_batch=40)
    def send(batch: Batch) -> None:
        for job in batch:
            if job.id == fenced and not taken_back:  # its lease expires and is taken back
                taken_back.append(job.id)
                with psycopg.connect(db_url, autocommit=True) as other:
                    other.execute(
                        "UPDATE jobs SET locked_until = %s, started_token = lease_token "
                        "WHERE id = %s",
                        (T0, job.id),
                    )
                    assert len(PgJobStore(other).reap(10, T0 + timedelta(seconds=1))) == 1
            elif job.id == retried:
                batch.retry(job, "later")
            elif job.id == effect_failed:
                batch.in_completion(fail)

    finished: list[tuple[Job, float]] = []  # in the order the worker settles them

    def on_outcome(job: Job, _decision: Decision, duration_ms: float) -> None:
        finished.append((job, duration_ms))

    registry = CollectorRegistry()
    worker = Worker(
        db_url, {"send": send}, {"default": 1}, clock=FrozenClock(T0), listen=False,
        prefetch=1000, retry=POLICY, metrics=Metrics.for_registry(registry),
        on_outcome=on_outcome,
    )  # fmt: skip
    stats = worker.run_until_idle()
    assert stats.batches == 4
    assert stats.outcomes == {"succeeded": 79, "fenced": 1, "retry": 21}
    assert [job.id for job, _ in finished] == [*ids, fenced]

    expected_registry = CollectorRegistry()
    expected = Metrics.for_registry(expected_registry)
    for job, duration_ms in finished:
        expected.execution_duration.labels(job.queue, job.job_type).observe(duration_ms / 1000)
    for outcome, n in stats.outcomes.items():
        expected.outcomes.labels("default", "send", outcome).inc(n)
    assert series(registry, HISTOGRAM) == series(expected_registry, HISTOGRAM)
    assert series(registry, OUTCOMES) == series(expected_registry, OUTCOMES)
    assert f'{HISTOGRAM}_count{{job_type="send",queue="default"}} 101.0' in series(
        registry, HISTOGRAM
    )
