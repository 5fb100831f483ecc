"""Expiry of late work (issue 24): a job not started within its max_lateness ends 'expired'.

Not run, no attempt row, its attempt given back, counted, requeueable like a dead letter; on
every enqueue path (one job, a COPY batch, the INSERT fallback, unique keys and their replace),
for single, batch and async handlers, and the handler's ``on_expired`` runs in the completion
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

import jobs
from jobs import Job, JobSpec, Worker
from jobs.batch import Batch, BatchHandler
from jobs.metrics import Metrics
from timezones.clock import FrozenClock

T0 = datetime(2026, 3, 8, 8, 0, tzinfo=UTC)
LATE = timedelta(minutes=10)


def status(conn: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    r = conn.execute(
        "SELECT status, attempts, expires_at, last_error_code, completed_at FROM jobs_all"
        " WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert r is not None
    return tuple(r)


def expired_count(metrics: Metrics, job_type: str, queue: str = "default") -> float:
    value = metrics.registry.get_sample_value(
        "tockwork_jobs_expired_total", {"queue": queue, "job_type": job_type}
    )
    return value or 0.0


def test_expires_at_is_run_at_plus_the_lateness_on_every_enqueue_path(
    conn: psycopg.Connection[Any],
) -> None:
    one = jobs.enqueue(conn, "t", {}, now=T0, max_lateness=LATE).id
    later = jobs.enqueue(conn, "t", {}, run_at=T0 + LATE, max_lateness=60.5, now=T0).id
    plain = jobs.enqueue(conn, "t", {}, now=T0).id
    copied = jobs.enqueue_many(
        conn,
        [JobSpec("t", run_at=T0, max_lateness=LATE), JobSpec("t", run_at=T0)],
        now=T0,
    )
    # A repeated idempotency key sends the batch through INSERT ... ON CONFLICT.
    inserted = jobs.enqueue_many(
        conn,
        [
            JobSpec("t", run_at=T0, idempotency_key="k", max_lateness=LATE),
            JobSpec("t", run_at=T0, idempotency_key="k", max_lateness=LATE),
        ],
        now=T0,
    )
    unique = jobs.enqueue(conn, "u", {}, run_at=T0, unique_key="a", max_lateness=LATE).id
    replaced = jobs.enqueue(
        conn, "u", {}, run_at=T0 + LATE, unique_key="a", on_active="replace", max_lateness=5
    )
    assert replaced.replaced and replaced.id == unique
    many_unique = jobs.enqueue_many(
        conn, [JobSpec("u", run_at=T0, unique_key="b", max_lateness=LATE)], now=T0
    )
    many_replaced = jobs.enqueue_many(
        conn,
        [JobSpec("u", run_at=T0, unique_key="b", on_active="replace", max_lateness=7)],
        now=T0,
    )
    assert many_replaced[0].replaced
    conn.commit()
    assert status(conn, one)[2] == T0 + LATE
    assert status(conn, later)[2] == T0 + LATE + timedelta(seconds=60.5)
    assert status(conn, plain)[2] is None
    assert status(conn, copied[0].id)[2] == T0 + LATE
    assert status(conn, copied[1].id)[2] is None
    assert status(conn, inserted[0].id)[2] == T0 + LATE
    assert status(conn, unique)[2] == T0 + LATE + timedelta(seconds=5)
    assert status(conn, many_unique[0].id)[2] == T0 + timedelta(seconds=7)


@pytest.mark.parametrize(
    "value", [0, -1, timedelta(0), timedelta(seconds=-5), float("nan"), float("inf"), "10", True,
              timedelta(days=367)],
)  # fmt: skip
def test_a_bad_lateness_is_refused_naming_the_field(
    conn: psycopg.Connection[Any], value: Any
) -> None:
    with pytest.raises(jobs.InvalidJob) as raised:
        jobs.enqueue(conn, "t", {}, max_lateness=value)
    assert raised.value.field == "max_lateness"
    with pytest.raises(jobs.InvalidJob) as raised:
        jobs.enqueue_many(conn, [JobSpec("t"), JobSpec("t", max_lateness=value)])
    assert raised.value.field == "specs[1].max_lateness"


def test_a_job_claimed_after_its_lateness_is_expired_unrun_and_requeueable(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    ran: list[int] = []
    late = jobs.enqueue(conn, "pill", {}, now=T0, max_lateness=LATE).id
    on_time = jobs.enqueue(conn, "pill", {}, now=T0 + LATE, max_lateness=LATE).id
    no_limit = jobs.enqueue(conn, "pill", {}, now=T0).id
    conn.commit()
    metrics = Metrics(CollectorRegistry())
    # The worker comes back 10 minutes and one second after the first job's time (an outage).
    at = T0 + LATE + timedelta(seconds=1)
    worker = Worker(
        db_url,
        {"pill": lambda job: ran.append(job.id)},
        clock=FrozenClock(at),
        listen=False,
        metrics=metrics,
    )
    stats = worker.run_until_idle()
    assert sorted(ran) == [on_time, no_limit]
    assert status(conn, late) == ("expired", 0, T0 + LATE, "expired", at)
    assert jobs.job_attempts(conn, late) == []  # it never ran: no attempt row
    assert status(conn, on_time)[0] == "succeeded"
    assert stats.outcomes.get("expired") == 1
    assert expired_count(metrics, "pill") == 1.0
    # Not run: the handler-time histogram observed only the two jobs that ran.
    runs = metrics.registry.get_sample_value(
        "tockwork_job_execution_duration_seconds_count", {"queue": "default", "job_type": "pill"}
    )
    assert runs == 2.0
    assert [r.id for r in jobs.list_jobs(conn, statuses=["expired"])] == [late]
    # Requeued like a dead letter: it runs now, without its old limit.
    assert jobs.requeue(conn, ids=[late], statuses=["expired"], now=at) == [late]
    conn.commit()
    assert status(conn, late)[:3] == ("pending", 0, None)
    Worker(db_url, {"pill": lambda job: ran.append(job.id)}, clock=FrozenClock(at),
           listen=False).run_until_idle()  # fmt: skip
    assert ran[-1] == late and status(conn, late)[0] == "succeeded"


def test_a_retry_past_the_lateness_expires_with_its_error_kept(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """The limit is an instant fixed at enqueue: a retry due after it does not start."""
    job_id = jobs.enqueue(conn, "flaky", {}, now=T0, max_lateness=LATE).id
    conn.commit()

    def fail(_job: Job) -> None:
        raise jobs.Retry(after=LATE * 2)

    Worker(db_url, {"flaky": fail}, clock=FrozenClock(T0), listen=False).run_until_idle()
    assert status(conn, job_id)[:2] == ("retrying", 1)
    at = T0 + LATE * 2
    Worker(db_url, {"flaky": fail}, clock=FrozenClock(at), listen=False).run_until_idle()
    assert status(conn, job_id) == ("expired", 1, T0 + LATE, "expired", at)
    assert [a.outcome for a in jobs.job_attempts(conn, job_id)] == ["retry"]


class _Recording(BatchHandler):
    """A batch handler whose on_expired writes a row in the completion transaction."""

    def __init__(self) -> None:
        super().__init__(max_batch=50)
        self.ran: list[int] = []

    def __call__(self, batch: Batch) -> None:
        self.ran.extend(j.id for j in batch.jobs)

    def on_expired(self, conn: psycopg.Connection[Any], expired: Sequence[Job]) -> None:
        conn.execute(
            "INSERT INTO expired_seen (job_id) SELECT unnest(%s::bigint[])",
            ([j.id for j in expired],),
        )


def test_a_batch_runs_its_live_jobs_and_records_its_expired_ones_in_the_same_transaction(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    conn.execute("CREATE TABLE expired_seen (job_id bigint PRIMARY KEY)")
    specs = [JobSpec("reminder", run_at=T0 + timedelta(minutes=i), max_lateness=LATE)
             for i in range(20)]  # fmt: skip
    ids = [e.id for e in jobs.enqueue_many(conn, specs, now=T0)]
    conn.commit()
    handler = _Recording()
    at = T0 + timedelta(minutes=19)  # the first 9 are more than 10 minutes late
    Worker(db_url, {"reminder": handler}, clock=FrozenClock(at), listen=False).run_until_idle()
    expired = {r[0] for r in conn.execute("SELECT job_id FROM expired_seen").fetchall()}
    assert expired == set(ids[:9])
    assert sorted(handler.ran) == ids[9:]
    assert {status(conn, i)[0] for i in ids[:9]} == {"expired"}


def test_an_async_handler_does_not_run_expired_jobs(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    ran: list[int] = []

    async def handler(job: Job) -> None:
        ran.append(job.id)

    late = jobs.enqueue(conn, "a", {}, now=T0, max_lateness=LATE).id
    fresh = jobs.enqueue(conn, "a", {}, now=T0 + LATE * 2, max_lateness=LATE).id
    conn.commit()
    Worker(db_url, {"a": handler}, clock=FrozenClock(T0 + LATE * 2), listen=False).run_until_idle()
    assert ran == [fresh]
    assert status(conn, late)[0] == "expired"
