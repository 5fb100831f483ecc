"""Finished jobs leave ``jobs`` for ``job_history`` (jobs migration 0021).

A job that succeeds, is cancelled or expires is moved by the statement that ends it; dead letters
and live work stay. Idempotency keys stay taken while the finished job is kept: an enqueue that
raced the completion moving its key's holder (waiting on it in the unique index, then going on)
finds the holder in ``job_history`` in a later statement and gives its row back.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import JobSpec, JobStatus
from jobs.retry import SUCCEEDED
from jobs.store import Finished, PgJobStore
from tests.locks import wait_for_lock_wait

T0 = datetime(2026, 3, 8, 8, 0, tzinfo=UTC)
LEASE = timedelta(minutes=5)


def where(conn: psycopg.Connection[Any], job_id: int) -> list[tuple[str, str]]:
    """Which tables hold the job, with its status there."""
    rows = conn.execute(
        "SELECT 'jobs', status FROM jobs WHERE id = %(id)s"
        " UNION ALL SELECT 'job_history', status FROM job_history WHERE id = %(id)s",
        {"id": job_id},
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def claim_one(conn: psycopg.Connection[Any], now: datetime = T0) -> Finished:
    (job,) = PgJobStore(conn).claim({"default": 1}, "w1", LEASE, now)
    conn.commit()
    return Finished(job, SUCCEEDED, now, 1.0)


def test_a_succeeded_job_moves_to_history_and_reads_as_before(
    conn: psycopg.Connection[Any],
) -> None:
    job_id = jobs.enqueue(conn, "t", {"a": 1}, idempotency_key="k1", now=T0).id
    conn.commit()
    before = jobs.get_job(conn, job_id)
    PgJobStore(conn).complete([claim_one(conn)], "w1", T0)
    conn.commit()
    assert where(conn, job_id) == [("job_history", "succeeded")]
    record = jobs.get_job(conn, job_id)
    assert record.status is JobStatus.SUCCEEDED
    assert (record.payload, record.idempotency_key, record.attempts) == ({"a": 1}, "k1", 1)
    assert record.completed_at == T0 and record.created_at == before.created_at
    assert [r.id for r in jobs.list_jobs(conn, statuses=["succeeded"])] == [job_id]
    # The key is still taken: an enqueue returns the finished job.
    again = jobs.enqueue(conn, "t", {"a": 2}, idempotency_key="k1", now=T0)
    assert (again.id, again.created) == (job_id, False)
    assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)


def test_a_fenced_outcome_moves_nothing(conn: psycopg.Connection[Any]) -> None:
    job_id = jobs.enqueue(conn, "t", {}, now=T0).id
    conn.commit()
    stale = claim_one(conn)
    conn.execute("UPDATE jobs SET lease_token = lease_token + 1 WHERE id = %s", (job_id,))
    written = PgJobStore(conn).complete([stale], "w1", T0)
    conn.commit()
    assert written == {job_id: "fenced"}
    assert where(conn, job_id) == [("jobs", "leased")]


def test_dead_letters_stay_and_cancelled_ones_move(conn: psycopg.Connection[Any]) -> None:
    dead = jobs.enqueue(conn, "t", {}, now=T0).id
    waiting = jobs.enqueue(conn, "t", {}, idempotency_key="w", now=T0).id
    conn.execute("UPDATE jobs SET status = 'dead', completed_at = %s WHERE id = %s", (T0, dead))
    conn.commit()
    assert sorted(jobs.cancel(conn, ids=[waiting], now=T0)) == [waiting]
    conn.commit()
    assert where(conn, dead) == [("jobs", "dead")]
    assert where(conn, waiting) == [("job_history", "cancelled")]
    # Requeued from history: back in jobs, pending, with its key.
    assert list(jobs.requeue(conn, ids=[waiting], statuses=["cancelled"], now=T0)) == [waiting]
    conn.commit()
    assert where(conn, waiting) == [("jobs", "pending")]
    assert jobs.get_job(conn, waiting).idempotency_key == "w"


def test_supersede_moves_the_waiting_job_under_its_renamed_key(
    conn: psycopg.Connection[Any],
) -> None:
    job_id = jobs.enqueue(conn, "t", {}, idempotency_key="occ", now=T0).id
    conn.commit()
    assert jobs.admin.supersede(
        conn, job_type="t", idempotency_keys=["occ"], suffix="~1", now=T0
    ) == [job_id]
    again = jobs.enqueue(conn, "t", {}, idempotency_key="occ", now=T0)
    conn.commit()
    assert again.created and again.id != job_id
    assert jobs.get_job(conn, job_id).idempotency_key == "occ~1"
    assert where(conn, job_id) == [("job_history", "cancelled")]


Enqueue = Callable[[psycopg.Connection[Any]], int]


def _one(c: psycopg.Connection[Any]) -> int:
    return jobs.enqueue(c, "t", {"n": 2}, idempotency_key="race", now=T0).id


def _many(c: psycopg.Connection[Any]) -> int:
    # A repeated key: the INSERT ... ON CONFLICT path.
    specs = [JobSpec("t", {"n": 2}, idempotency_key="race"), JobSpec("t", idempotency_key="x")]
    return jobs.enqueue_many(c, [specs[0], specs[0], specs[1]], now=T0)[0].id


def _columns(c: psycopg.Connection[Any]) -> int:
    # No repeated key: the COPY path (the scheduler's herd path).
    specs = [JobSpec("t", {"n": 2}, idempotency_key="race"), JobSpec("t", idempotency_key="y")]
    return jobs.enqueue_many(c, specs, now=T0)[0].id


def _async(c: psycopg.Connection[Any]) -> int:
    async def run() -> int:
        async with await psycopg.AsyncConnection.connect(
            c.info.dsn, application_name="enqueuer"
        ) as ac:
            one = await jobs.enqueue_async(ac, "t", {}, idempotency_key="race", now=T0)
            many = await jobs.enqueue_many_async(
                ac, [JobSpec("t", idempotency_key="race"), JobSpec("t", idempotency_key="z")]
            )
            assert many[0].id == one.id
            await ac.commit()
            return one.id

    return asyncio.run(run())


ENQUEUES: dict[str, Enqueue] = {"one": _one, "many": _many, "columns": _columns, "async": _async}


def race(db_url: str, enqueue: Enqueue) -> tuple[int, int]:
    """A completion moving the key's holder to job_history holds its row lock while an enqueue
    of the same key waits on it in the unique index; the completion commits; the enqueue goes
    on. The holder's id and what the enqueue returned."""
    with psycopg.connect(db_url) as setup:
        holder = jobs.enqueue(setup, "t", {"n": 1}, idempotency_key="race", now=T0).id
        setup.commit()
        finished = claim_one(setup)
    result: list[int] = []
    errors: list[BaseException] = []

    def enqueuer() -> None:
        try:
            with psycopg.connect(db_url, application_name="enqueuer") as c:
                result.append(enqueue(c))
                c.commit()
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    with psycopg.connect(db_url) as completer:
        PgJobStore(completer).complete([finished], "w1", T0)  # the row moved, not committed
        thread = threading.Thread(target=enqueuer)
        thread.start()
        wait_for_lock_wait(db_url, "enqueuer")
        completer.commit()
    thread.join(30)
    assert not thread.is_alive() and not errors, errors
    return holder, result[0]


@pytest.mark.parametrize("path", sorted(ENQUEUES))
def test_an_enqueue_racing_the_completion_of_its_key_holder_returns_it(
    db_url: str, conn: psycopg.Connection[Any], path: str
) -> None:
    holder, got = race(db_url, ENQUEUES[path])
    assert got == holder
    assert where(conn, holder) == [("job_history", "succeeded")]
    assert conn.execute(
        "SELECT count(*) FROM jobs_all WHERE idempotency_key = 'race'"
    ).fetchone() == (1,)


@pytest.mark.parametrize("path", sorted(ENQUEUES))
def test_without_the_later_check_the_race_makes_a_duplicate(
    db_url: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """What the test above catches, on each path: a check inside the insert's own statement
    (its snapshot predates the completion's commit) would miss the holder. With the later
    statement gone, the race leaves two jobs under one key."""
    module = importlib.import_module("jobs.enqueue")
    real_query = module.query

    def nothing_held(*args: Any) -> Any:
        return {}
        yield  # a generator of steps

    def without_single_check(name: str) -> Any:
        return "SELECT 1 WHERE false" if name == "job_history_settle_key" else real_query(name)

    monkeypatch.setattr(module, "_settle_keys_steps", nothing_held)
    monkeypatch.setattr(module, "query", without_single_check)
    holder, got = race(db_url, ENQUEUES[path])
    assert got != holder
    assert conn.execute(
        "SELECT count(*) FROM jobs_all WHERE idempotency_key = 'race'"
    ).fetchone() == (2,)


def test_retention_drops_the_days_of_finished_jobs(conn: psycopg.Connection[Any]) -> None:
    from jobs import maintenance, partitions

    day = T0.date()
    conn.autocommit = True
    created = partitions.ensure_partitions(conn, partitions.FINISHED, ahead_days=1, now=T0)
    assert created == [day, day + timedelta(days=1)]
    conn.autocommit = False
    job_id = jobs.enqueue(conn, "t", {}, now=T0).id
    conn.commit()
    PgJobStore(conn).complete([claim_one(conn)], "w1", T0)
    conn.commit()
    assert conn.execute(
        "SELECT tableoid::regclass::text FROM job_history WHERE id = %s", (job_id,)
    ).fetchone() == (f"job_history_p{day:%Y%m%d}",)
    conn.commit()
    conn.autocommit = True
    config = maintenance.RetentionConfig(finished_retention=timedelta(days=1))
    kept = maintenance.clean(conn, config, now=T0 + timedelta(hours=39))
    assert kept["jobs"] == 0 and where(conn, job_id) == [("job_history", "succeeded")]
    gone = maintenance.clean(conn, config, now=T0 + timedelta(hours=41))
    assert gone["jobs"] == 1 and where(conn, job_id) == []
    assert partitions.partitions(conn, partitions.FINISHED) == [day + timedelta(days=1)]
