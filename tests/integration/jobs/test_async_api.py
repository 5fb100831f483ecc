"""The async jobs API (issue 11) against its sync twin, on a real PostgreSQL.

``enqueue_many_async`` must write the same rows as ``enqueue_many`` for the same specs at the
same pinned instant (on both COPY formats and on the keyed INSERT fallback), keep the same
idempotency rules (a taken key returns its holder; a key repeated in a batch names one job),
leave nothing when the async transaction rolls back, and refuse bad input with the same typed
error naming the same field. The async admin functions return what the sync ones return.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest

import jobs
from jobs import InvalidJob, JobSpec

T0 = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)
ORG = uuid.UUID("00000000-0000-0000-0000-000000000042")

R = TypeVar("R")


def run(db_url: str, fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[R]]) -> R:
    """Run ``fn`` on a fresh AsyncConnection inside one transaction, committed at the end."""

    async def scenario() -> R:
        async with await psycopg.AsyncConnection.connect(db_url) as c, c.transaction():
            return await fn(c)

    return asyncio.run(scenario())


ROW = (
    "SELECT organization_id, queue, job_type, payload, idempotency_key, priority,"
    " run_at - created_at, max_attempts, status FROM jobs_all WHERE id = ANY(%s) ORDER BY id"
)


def rows(conn: psycopg.Connection[Any], ids: list[int]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(ROW, (ids,)).fetchall()]


BATCHES: dict[str, tuple[list[Any], datetime | None]] = {
    # Every column at the table's default: the narrow COPY.
    "defaults": ([JobSpec("push", {"n": i}) for i in range(5)], None),
    # Organizations, priorities, delays, pinned now: the binary COPY of every column.
    "full": (
        [
            JobSpec("push", {"n": 1}, queue="q1", organization_id=ORG, priority=3),
            {"job_type": "mail", "payload": [1, "x"], "run_at": T0 + timedelta(hours=1)},
            JobSpec("push", None, max_attempts=2, queue="q2"),
        ],
        T0,
    ),
    # Keys: the COPY inside a savepoint.
    "keyed": ([JobSpec("push", {"n": i}, idempotency_key=f"k{i}") for i in range(4)], T0),
    # A key repeated in the batch: the INSERT ... ON CONFLICT path; one job for both.
    "repeated": (
        [
            JobSpec("push", {"n": 1}, idempotency_key="same"),
            JobSpec("push", {"n": 2}, idempotency_key="same"),
            JobSpec("push", {"n": 3}, idempotency_key="other", organization_id=ORG),
        ],
        T0,
    ),
}


@pytest.mark.parametrize("batch", sorted(BATCHES))
def test_enqueue_many_async_writes_what_enqueue_many_writes(
    conn: psycopg.Connection[Any], db_url: str, batch: str
) -> None:
    specs, now = BATCHES[batch]
    sync = jobs.enqueue_many(conn, specs, now=now)
    sync_rows = rows(conn, [e.id for e in sync])
    conn.rollback()
    done = run(db_url, lambda c: jobs.enqueue_many_async(c, specs, now=now))
    assert [e.created for e in done] == [e.created for e in sync]
    # Same pattern of ids (a repeated key names the job of its first spec).
    assert [[e.id for e in done].index(e.id) for e in done] == [
        [e.id for e in sync].index(e.id) for e in sync
    ]
    assert rows(conn, [e.id for e in done]) == sync_rows
    assert len(sync_rows) == len({e.id for e in sync}) > 0


def test_rollback_of_the_async_transaction_means_no_job(db_url: str) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(db_url) as c:
            async with c.transaction(force_rollback=True):
                made = await jobs.enqueue_many_async(
                    c, [JobSpec("push", {}), JobSpec("push", {}, idempotency_key="k")]
                )
                assert [e.created for e in made] == [True, True]
                with psycopg.connect(db_url) as other:  # not visible before commit
                    assert other.execute("SELECT count(*) FROM jobs_all").fetchone() == (0,)
            cur = await c.execute("SELECT count(*) FROM jobs_all")
            assert await cur.fetchone() == (0,)

    asyncio.run(scenario())
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM jobs_all").fetchone() == (0,)


def test_a_taken_key_returns_its_holder(conn: psycopg.Connection[Any], db_url: str) -> None:
    """The COPY in a savepoint fails on the taken key; the fallback returns the holder."""
    (holder,) = jobs.enqueue_many(conn, [JobSpec("push", {"v": 1}, idempotency_key="taken")])
    conn.commit()
    specs = [
        JobSpec("push", {"v": 2}, idempotency_key="free"),
        JobSpec("push", {"v": 2}, idempotency_key="taken"),
        JobSpec("other", {"v": 2}, idempotency_key="taken"),  # another type: another key
    ]
    done = run(db_url, lambda c: jobs.enqueue_many_async(c, specs))
    assert [e.created for e in done] == [True, False, True]
    assert done[1].id == holder.id
    assert conn.execute("SELECT payload FROM jobs_all WHERE id = %s", (holder.id,)).fetchone() == (
        {"v": 1},
    )
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (3,)
    # Again: every key is taken now; the same ids come back, nothing is written.
    again = run(db_url, lambda c: jobs.enqueue_many_async(c, specs))
    assert [(e.id, e.created) for e in again] == [(e.id, False) for e in done]
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (3,)


def test_concurrent_async_enqueuers_of_one_key_get_one_job(db_url: str) -> None:
    """Two async transactions enqueue the same key; the second waits on the first's row
    lock (the database's own wait, no sleep) and, once it commits, returns its job."""

    async def scenario() -> tuple[jobs.Enqueued, jobs.Enqueued]:
        async with (
            await psycopg.AsyncConnection.connect(db_url) as a,
            await psycopg.AsyncConnection.connect(db_url) as b,
        ):
            spec = [JobSpec("push", {}, idempotency_key="one")]
            await a.execute("SELECT 1")  # opens a's transaction
            (first,) = await jobs.enqueue_many_async(a, spec)
            second_task = asyncio.create_task(jobs.enqueue_many_async(b, spec))
            # Wait until b is blocked on a's uncommitted key.
            async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as w:
                while True:
                    cur = await w.execute(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE wait_event_type = 'Lock' AND datname = current_database()"
                    )
                    if await cur.fetchone() == (1,):
                        break
                    await asyncio.sleep(0)
            await a.commit()
            (second,) = await second_task
            await b.commit()
            return first, second

    first, second = asyncio.run(scenario())
    assert (first.created, second.created) == (True, False)
    assert second.id == first.id


@pytest.mark.parametrize(
    ("specs", "field"),
    [
        ([{"job_type": ""}], "specs[0].job_type"),
        ([JobSpec("push", {}), JobSpec("push", {}, queue="Bad Queue")], "specs[1].queue"),
        ([JobSpec("push", {}, priority=10**6)], "specs[0].priority"),
        ([JobSpec("push", {}, run_at=datetime(2026, 1, 1))], "specs[0].run_at"),
        ([JobSpec("push", {}, organization_id="nope")], "specs[0].organization_id"),
        ([JobSpec("push", {}, idempotency_key="")], "specs[0].idempotency_key"),
        ([{"job_type": "push", "bogus": 1}], "specs[0]"),
        (["not a spec"], "specs[0]"),
    ],
)
def test_bad_specs_are_refused_like_enqueue_many(
    conn: psycopg.Connection[Any], db_url: str, specs: list[Any], field: str
) -> None:
    with pytest.raises(InvalidJob) as sync_info:
        jobs.enqueue_many(conn, specs)
    conn.rollback()
    with pytest.raises(InvalidJob) as async_info:
        run(db_url, lambda c: jobs.enqueue_many_async(c, specs))
    assert async_info.value.field == sync_info.value.field == field
    assert str(async_info.value) == str(sync_info.value)
    assert isinstance(async_info.value, jobs.InvalidInput)
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (0,)


def test_bad_now_is_refused(db_url: str) -> None:
    with pytest.raises(InvalidJob) as info:
        run(db_url, lambda c: jobs.enqueue_many_async(c, [], now=datetime(2026, 1, 1)))
    assert info.value.field == "now"
    assert run(db_url, lambda c: jobs.enqueue_many_async(c, [])) == []


def test_admin_async_matches_the_sync_twins(conn: psycopg.Connection[Any], db_url: str) -> None:
    made = jobs.enqueue_many(
        conn,
        [JobSpec("push", {"n": i}, queue="q1" if i % 2 else "q2") for i in range(6)]
        + [JobSpec("push", {}, run_at=T0 + timedelta(days=1))],
        now=T0,
    )
    conn.commit()
    ids = [e.id for e in made]
    stats = run(db_url, lambda c: jobs.queue_stats_async(c, now=T0))
    assert stats == jobs.queue_stats(conn, now=T0)
    assert stats
    cancelled = run(db_url, lambda c: jobs.cancel_async(c, ids=ids[:3], reason="test", now=T0))
    assert sorted(cancelled) == ids[:3]
    listed = run(db_url, lambda c: jobs.list_jobs_async(c, statuses=["cancelled"]))
    assert listed == jobs.list_jobs(conn, statuses=["cancelled"])
    assert [r.id for r in listed] == ids[:3]
    filtered = run(db_url, lambda c: jobs.list_jobs_async(c, statuses=["pending"], queue="q1"))
    assert filtered == jobs.list_jobs(conn, statuses=["pending"], queue="q1")
    assert run(db_url, lambda c: jobs.get_job_async(c, ids[0])) == jobs.get_job(conn, ids[0])
    conn.rollback()
    requeued = run(
        db_url, lambda c: jobs.requeue_async(c, ids=ids[:2], statuses=["cancelled"], now=T0)
    )
    assert sorted(requeued) == ids[:2]
    assert [jobs.get_job(conn, i).status for i in ids[:3]] == ["pending", "pending", "cancelled"]
    # q2 holds specs 0, 2 and 4 (and the delayed one, in "default"); 0 is pending again.
    cancelled_q2 = run(db_url, lambda c: jobs.cancel_async(c, queue="q2", now=T0))
    assert sorted(cancelled_q2) == [ids[0], ids[4]]
    with pytest.raises(jobs.JobNotFound):
        run(db_url, lambda c: jobs.get_job_async(c, 10**12))


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: jobs.get_job_async(c, 0), "ids"),
        (lambda c: jobs.list_jobs_async(c, limit=0), "limit"),
        (lambda c: jobs.list_jobs_async(c, statuses=["gone"]), "statuses"),
        (lambda c: jobs.cancel_async(c, ids=None), "filter"),
        (lambda c: jobs.cancel_async(c, ids=[1], statuses=["succeeded"]), "statuses"),
        (lambda c: jobs.requeue_async(c, queue="Bad Queue"), "queue"),
        (lambda c: jobs.requeue_async(c, ids=[1], since=T0, until=T0), "until"),
        (lambda c: jobs.queue_stats_async(c, now=datetime(2026, 1, 1)), "now"),
    ],
)
def test_admin_async_bad_input_names_the_field(
    db_url: str, call: Callable[[psycopg.AsyncConnection[Any]], Awaitable[Any]], field: str
) -> None:
    with pytest.raises(InvalidJob) as info:
        run(db_url, call)
    assert info.value.field == field


@pytest.mark.parametrize(
    "name", ["enqueue_many", "requeue", "cancel", "list_jobs", "get_job", "queue_stats"]
)
def test_each_async_twin_takes_the_sync_parameters(name: str) -> None:
    import inspect

    sync = inspect.signature(getattr(jobs, name)).parameters
    twin = inspect.signature(getattr(jobs, f"{name}_async")).parameters
    assert [(p.name, p.kind, p.default) for p in twin.values()] == [
        (p.name, p.kind, p.default) for p in sync.values()
    ]
    assert inspect.iscoroutinefunction(getattr(jobs, f"{name}_async"))


def test_enqueue_async_keeps_the_concurrency_key_of_a_unique_job(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    made = run(
        db_url,
        lambda c: jobs.enqueue_async(
            c, "recompute", {}, unique_key="stats:user-9", concurrency_key="user-9"
        ),
    )
    replaced = run(
        db_url,
        lambda c: jobs.enqueue_async(
            c,
            "recompute",
            {"v": 2},
            unique_key="stats:user-9",
            on_active="replace",
            concurrency_key="user-9b",
        ),
    )
    assert (made.created, replaced.replaced, replaced.id) == (True, True, made.id)
    record = jobs.get_job(conn, made.id)
    # A replace takes the payload, run_at, priority and max_attempts; the queue and the
    # concurrency key stay the holder's (docs/jobs.md, "Unique while active").
    assert (record.unique_key, record.concurrency_key) == ("stats:user-9", "user-9")
    assert record.payload == {"v": 2}
