"""Claims, leases, fencing and the reaper, with real concurrent connections."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import JobSpec, PermanentError, RateLimited
from jobs.model import Job
from jobs.retry import SUCCEEDED, RetryPolicy, decide
from jobs.store import Finished, PgJobStore

T0 = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


@pytest.fixture
def stores(db_url: str) -> Iterator[Callable[[], PgJobStore]]:
    """Opens PgJobStores on autocommit connections and closes them after the test."""
    opened: list[psycopg.Connection[Any]] = []

    def make() -> PgJobStore:
        opened.append(psycopg.connect(db_url, autocommit=True))
        return PgJobStore(opened[-1])

    yield make
    for c in opened:
        c.close()


def status_of(conn: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT status, attempts, lease_token, locked_by FROM jobs_all WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return tuple(row)


def finished(job: Job) -> Finished:
    return Finished(job, SUCCEEDED, T0, 1.0)


def test_eight_concurrent_claimers_claim_each_job_once(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    with psycopg.connect(db_url) as c:
        jobs.enqueue_many(c, [JobSpec("noop", {"i": i}) for i in range(10_000)], now=T0)
    claimed: list[list[int]] = [[] for _ in range(8)]
    barrier = threading.Barrier(8)

    def claimer(n: int) -> None:
        s = PgJobStore(psycopg.connect(db_url, autocommit=True))
        barrier.wait(timeout=10)
        while True:
            batch = s.claim({"default": 50}, f"w{n}", LEASE, T0)
            if not batch:
                break
            claimed[n].extend(j.id for j in batch)
        s.conn.close()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for part in claimed for i in part]
    assert len(every) == 10_000
    assert len(set(every)) == 10_000
    assert sum(1 for part in claimed if part) >= 2  # the work really was shared
    with psycopg.connect(db_url) as c:
        assert c.execute(
            "SELECT count(*) FROM jobs_all WHERE status = 'leased' AND attempts = 1"
        ).fetchone() == (10_000,)


def test_claim_order_priority_then_run_at_and_only_ready(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    low = jobs.enqueue(conn, "t", {}, priority=0, run_at=T0 - timedelta(minutes=5)).id
    high = jobs.enqueue(conn, "t", {}, priority=10, run_at=T0).id
    older = jobs.enqueue(conn, "t", {}, priority=0, run_at=T0 - timedelta(minutes=9)).id
    jobs.enqueue(conn, "t", {}, priority=100, run_at=T0 + timedelta(seconds=1))
    jobs.enqueue(conn, "t", {}, queue="other", run_at=T0)
    conn.commit()
    got = stores().claim({"default": 10}, "w", LEASE, T0)
    assert [j.id for j in got] == [high, older, low]


def test_stale_worker_completion_is_fenced(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    job_id = jobs.enqueue(conn, "t", {}, now=T0).id
    conn.commit()
    a, b = stores(), stores()
    (job_a,) = a.claim({"default": 1}, "worker-a", LEASE, T0)
    a.heartbeat([(job_id, job_a.lease_token)], LEASE, T0, started=[job_id])  # it started
    # worker-a stalls past its lease; the reaper hands the job back and worker-b takes it.
    later = T0 + LEASE + timedelta(seconds=1)
    assert a.reap(100, later) == [(job_id, "default", "retrying")]
    (job_b,) = b.claim({"default": 1}, "worker-b", LEASE, later)
    assert job_b.lease_token > job_a.lease_token
    assert job_b.attempt == 2
    assert a.complete([finished(job_a)], "worker-a", later) == {job_id: "fenced"}
    assert status_of(conn, job_id) == ("leased", 2, job_b.lease_token, "worker-b")
    assert a.heartbeat([(job_id, job_a.lease_token)], LEASE, later) == set()
    assert b.complete([finished(job_b)], "worker-b", later) == {job_id: "succeeded"}
    assert status_of(conn, job_id)[:2] == ("succeeded", 2)
    # A second write with the same token (a retry after a lost connection) is fenced too.
    assert b.complete([finished(job_b)], "worker-b", later) == {job_id: "fenced"}
    assert status_of(conn, job_id)[:2] == ("succeeded", 2)
    history = [(x.attempt, x.worker, x.outcome) for x in jobs.job_attempts(conn, job_id)]
    assert history == [
        (1, "worker-a", "lease_expired"),
        (1, "worker-a", "fenced"),
        (2, "worker-b", "succeeded"),
        (2, "worker-b", "fenced"),
    ]


def test_leased_before_tells_a_first_claim_from_every_later_one(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    """A rate-limited run gives its attempt back and a requeue starts the attempts afresh: the
    job is at attempt 1 again, but it may have run (and had effects). ``leased_before`` says
    so from the lease token, which only grows; a first claim's is the timeline's floor."""
    job_id = jobs.enqueue(conn, "t", {}, now=T0).id
    conn.commit()
    s = stores()
    (first,) = s.claim({"default": 1}, "w", LEASE, T0)
    assert (first.attempt, first.leased_before) == (1, False)
    limited = Finished(first, decide(first, RateLimited(1.0), RetryPolicy()), T0, 1.0)
    assert s.complete([limited], "w", T0) == {job_id: "rate_limited"}
    later = T0 + timedelta(seconds=2)
    (second,) = s.claim({"default": 1}, "w", LEASE, later)
    assert (second.attempt, second.leased_before) == (1, True)
    dead = Finished(second, decide(second, PermanentError("no"), RetryPolicy()), later, 1.0)
    assert s.complete([dead], "w", later) == {job_id: "dead"}
    assert list(jobs.requeue(conn, ids=[job_id], now=later)) == [job_id]
    conn.commit()
    (third,) = s.claim({"default": 1}, "w", LEASE, later)
    assert (third.attempt, third.leased_before) == (1, True)
    # A retry counts its attempt: the other half of the rule.
    assert dataclasses.replace(first, attempt=2).leased_before


def test_heartbeat_extends_the_lease(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    job_id = jobs.enqueue(conn, "t", {}, now=T0).id
    conn.commit()
    s = stores()
    (job,) = s.claim({"default": 1}, "w", LEASE, T0)
    t1 = T0 + timedelta(seconds=25)
    assert s.heartbeat([(job.id, job.lease_token)], LEASE, t1) == {job_id}
    assert s.reap(10, T0 + LEASE + timedelta(seconds=1)) == []  # not expired any more
    row = conn.execute("SELECT locked_until FROM jobs_all WHERE id = %s", (job_id,)).fetchone()
    assert row == (t1 + LEASE,)


def test_reaper_sends_exhausted_jobs_to_dead(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    job_id = jobs.enqueue(conn, "t", {}, max_attempts=1, now=T0).id
    conn.commit()
    s = stores()
    (job,) = s.claim({"default": 1}, "w", LEASE, T0)
    s.heartbeat([(job_id, job.lease_token)], LEASE, T0, started=[job_id])  # it started
    assert s.reap(10, T0 + timedelta(minutes=5)) == [(job_id, "default", "dead")]
    record = jobs.get_job(conn, job_id)
    assert record.status == "dead"
    assert record.last_error_code == "lease_expired"
    assert record.completed_at == T0 + timedelta(minutes=5)


def test_release_gives_leases_back(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    job_id = jobs.enqueue(conn, "t", {}, now=T0).id
    conn.commit()
    s = stores()
    (job,) = s.claim({"default": 1}, "w", LEASE, T0)
    assert s.release([(job.id, job.lease_token)], "w", T0) == [job_id]
    assert status_of(conn, job_id)[:1] == ("retrying",)
    assert [a.outcome for a in jobs.job_attempts(conn, job_id)] == ["interrupted"]
    (again,) = s.claim({"default": 1}, "w", LEASE, T0)
    assert again.id == job_id


@pytest.mark.parametrize("limit", [1, 3])
def test_claim_respects_per_queue_limits(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore], limit: int
) -> None:
    jobs.enqueue_many(conn, [JobSpec("t", {}, queue="a") for _ in range(5)], now=T0)
    jobs.enqueue_many(conn, [JobSpec("t", {}, queue="b") for _ in range(5)], now=T0)
    conn.commit()
    got = stores().claim({"a": limit, "b": 2}, "w", LEASE, T0)
    assert sum(1 for j in got if j.queue == "a") == limit
    assert sum(1 for j in got if j.queue == "b") == 2


def test_a_claim_takes_due_jobs_by_priority_past_future_ones(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    """The claim reads one priority at a time (job_claim's loose scan): future jobs at any
    priority are passed over, and the due ones come in (priority, run_at, id) order across
    levels, even when fewer are due than wanted."""
    future = T0 + timedelta(minutes=5)
    specs = [
        JobSpec("noop", {"p": p, "i": i}, priority=p, run_at=future)
        for p in (7, 3, 0, -2)
        for i in range(50)
    ]
    due = [
        JobSpec("noop", {"p": p, "i": i}, priority=p, run_at=T0 - timedelta(seconds=i))
        for p in (3, 0, -2)
        for i in range(2)
    ]
    with psycopg.connect(db_url) as conn:
        jobs.enqueue_many(conn, [*specs, *due], now=T0)
    store = stores()
    claimed = store.claim({"default": 100}, "w", timedelta(seconds=30), T0)
    got = [(j.payload["p"], j.payload["i"]) for j in claimed]
    assert got == [(3, 1), (3, 0), (0, 1), (0, 0), (-2, 1), (-2, 0)]
    # A smaller claim takes the highest priorities first.
    with psycopg.connect(db_url) as conn:
        jobs.enqueue_many(conn, due, now=T0)
    two = store.claim({"default": 3}, "w", timedelta(seconds=30), T0)
    assert [(j.payload["p"], j.payload["i"]) for j in two] == [(3, 1), (3, 0), (0, 1)]


def test_next_due_is_the_earliest_waiting_job_after_now_in_any_priority_and_queue(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    # job_next_due reads each priority of each queue on its own (a loose scan of the ready
    # index): the answer is the earliest job after now among all of them, whatever the
    # priorities and whichever comes first in the index.
    s = stores()
    assert s.next_due(["a", "b"], T0) is None  # nothing waits
    second = timedelta(seconds=1)
    with conn.transaction():
        jobs.enqueue_many(
            conn,
            [
                JobSpec("t", queue="a", priority=5, run_at=T0 + 40 * second),
                JobSpec("t", queue="a", priority=5, run_at=T0 + 30 * second),
                JobSpec("t", queue="a", priority=0, run_at=T0 + 20 * second),
                JobSpec("t", queue="a", priority=-3, run_at=T0 + 25 * second),
                JobSpec("t", queue="b", priority=1, run_at=T0 + 15 * second),
                # ready now, or claimed: not what an idle worker waits for
                JobSpec("t", queue="a", priority=9, run_at=T0 - second),
                JobSpec("t", queue="b", priority=9, run_at=T0),
                JobSpec("t", queue="c", priority=0, run_at=T0 + 5 * second),
            ],
            now=T0,
        )
    assert len(s.claim({"b": 1}, "w", LEASE, T0)) == 1
    assert s.next_due(["a"], T0) == pytest.approx(20.0)
    assert s.next_due(["a", "b"], T0) == pytest.approx(15.0)
    assert s.next_due(["b", "a"], T0 + 16 * second) == pytest.approx(4.0)
    assert s.next_due(["a"], T0 + 26 * second) == pytest.approx(4.0)  # priority 5's 30 s
    assert s.next_due(["a", "b"], T0 + 40 * second) is None
    assert s.next_due(["nothing"], T0) is None
