"""Transactional enqueue against a real PostgreSQL: rollback, commit, idempotency, bad input."""

from __future__ import annotations

import asyncio
import importlib
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import JobSpec
from jobs.queries import query as jobs_query
from jobs.validate import DEFAULT_MAX_ATTEMPTS

T0 = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)


def count(url: str, where: str = "true") -> int:
    with psycopg.connect(url) as c:
        row = c.execute(f"SELECT count(*) FROM jobs_all WHERE {where}").fetchone()  # noqa: S608
        assert row is not None
        return int(row[0])


def test_rollback_means_no_job(db_url: str) -> None:
    with psycopg.connect(db_url) as c:
        with c.transaction(force_rollback=True):
            result = jobs.enqueue(c, "send_push", {"user": 1})
            assert result.created
            assert count(db_url) == 0  # not visible to others before commit
        assert c.execute("SELECT count(*) FROM jobs_all").fetchone() == (0,)
    assert count(db_url) == 0


def test_commit_means_job(db_url: str) -> None:
    with psycopg.connect(db_url) as c:
        with c.transaction():
            result = jobs.enqueue(
                c, "send_push", {"user": 1}, queue="notifications", priority=5, now=T0
            )
            assert count(db_url) == 0
        row = c.execute(
            "SELECT queue, job_type, payload, status, priority, run_at, attempts, max_attempts"
            " FROM jobs_all WHERE id = %s",
            (result.id,),
        ).fetchone()
    assert row == ("notifications", "send_push", {"user": 1}, "pending", 5, T0, 0, 10)


def test_run_at_delays_the_job(conn: psycopg.Connection[Any]) -> None:
    later = T0 + timedelta(hours=3)
    job_id = jobs.enqueue(conn, "report", run_at=later, now=T0).id
    row = conn.execute("SELECT run_at, payload FROM jobs_all WHERE id = %s", (job_id,)).fetchone()
    assert row == (later, {})


def test_same_key_yields_one_job_without_organization(conn: psycopg.Connection[Any]) -> None:
    first = jobs.enqueue(conn, "remind", {"n": 1}, idempotency_key="r:42:2026-10-27")
    again = jobs.enqueue(conn, "remind", {"n": 2}, idempotency_key="r:42:2026-10-27")
    assert first.created and not again.created
    assert again.id == first.id
    assert conn.execute("SELECT count(*), min(payload->>'n') FROM jobs_all").fetchone() == (1, "1")


def test_key_scope_is_organization_and_job_type(conn: psycopg.Connection[Any]) -> None:
    org_a, org_b = uuid.uuid4(), uuid.uuid4()
    ids = {
        jobs.enqueue(conn, "remind", idempotency_key="k", organization_id=org_a).id,
        jobs.enqueue(conn, "remind", idempotency_key="k", organization_id=org_b).id,
        jobs.enqueue(conn, "remind", idempotency_key="k").id,
        jobs.enqueue(conn, "other", idempotency_key="k", organization_id=org_a).id,
    }
    assert len(ids) == 4
    again = jobs.enqueue(conn, "remind", idempotency_key="k", organization_id=str(org_a))
    assert not again.created
    assert again.id in ids


def test_sixteen_concurrent_enqueuers_of_one_key_get_one_job(db_url: str) -> None:
    barrier = threading.Barrier(16)
    results: list[jobs.Enqueued] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def enqueuer(n: int) -> None:
        try:
            with psycopg.connect(db_url) as c:
                with c.transaction():
                    barrier.wait(timeout=10)
                    r = jobs.enqueue(c, "remind", {"from": n}, idempotency_key="herd")
                    # Hold the transaction open a little so that others wait on our row.
                    c.execute("SELECT pg_sleep(0.02)")
                with lock:
                    results.append(r)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=enqueuer, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 16
    assert len({r.id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert count(db_url) == 1


def test_enqueue_many_in_one_statement_with_idempotency(conn: psycopg.Connection[Any]) -> None:
    existing = jobs.enqueue(conn, "remind", idempotency_key="a").id
    specs: list[JobSpec | dict[str, Any]] = [
        JobSpec("remind", {"i": 0}, idempotency_key="a"),  # exists in the table
        JobSpec("remind", {"i": 1}, idempotency_key="b"),
        {"job_type": "remind", "payload": {"i": 2}, "idempotency_key": "b"},  # dup in batch
        JobSpec("report", {"i": 3}, queue="reports"),
        JobSpec("report", {"i": 4}, queue="reports"),
    ]
    out = jobs.enqueue_many(conn, specs)
    assert [r.created for r in out] == [False, True, False, True, True]
    assert out[0].id == existing
    assert out[1].id == out[2].id
    assert len({r.id for r in out}) == 4
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (4,)
    assert jobs.enqueue_many(conn, []) == []


def test_enqueue_many_thousands(conn: psycopg.Connection[Any]) -> None:
    out = jobs.enqueue_many(
        conn, (JobSpec("noop", {"i": i}, idempotency_key=f"k{i % 2500}") for i in range(5000))
    )
    assert len(out) == 5000
    assert sum(r.created for r in out) == 2500
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (2500,)
    assert out[0].id == out[2500].id


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"queue": "Bad Queue!"}, "queue"),
        ({"queue": ""}, "queue"),
        ({"payload": {"when": datetime(2026, 1, 1, tzinfo=UTC)}}, "payload"),
        ({"payload": {"x": float("nan")}}, "payload"),
        ({"payload": {"x": object()}}, "payload"),
        ({"priority": 5000}, "priority"),
        ({"priority": True}, "priority"),
        ({"run_at": datetime(2026, 1, 1, 8, 0)}, "run_at"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"organization_id": "not-a-uuid"}, "organization_id"),
        ({"job_type": ""}, "job_type"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(
    conn: psycopg.Connection[Any], kwargs: dict[str, Any], field: str
) -> None:
    args: dict[str, Any] = {"job_type": "send_push", "payload": {}, **kwargs}
    job_type = args.pop("job_type")
    payload = args.pop("payload")
    with pytest.raises(jobs.InvalidJob) as info:
        jobs.enqueue(conn, job_type, payload, **args)
    assert info.value.field == field
    assert field in str(info.value)
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (0,)


def test_enqueue_many_validates_every_spec_before_writing(conn: psycopg.Connection[Any]) -> None:
    specs = [JobSpec("ok", {}), JobSpec("ok", {}, queue="NOPE")]
    with pytest.raises(jobs.InvalidJob) as info:
        jobs.enqueue_many(conn, specs)
    assert info.value.field == "specs[1].queue"
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (0,)


def test_one_notification_per_queue_per_transaction(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN tockwork_jobs")
        with psycopg.connect(db_url) as c, c.transaction():
            for i in range(50):
                jobs.enqueue(c, "a", {"i": i}, queue="alpha")
            jobs.enqueue_many(c, [JobSpec("b", {}, queue="beta") for _ in range(20)])
            jobs.enqueue(c, "later", queue="gamma", run_at=datetime(2099, 1, 1, tzinfo=UTC))
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
    assert sorted(notes) == ["alpha", "beta"]


def test_a_job_with_every_default_is_the_row_the_general_insert_writes(db_url: str) -> None:
    """The common call takes job_enqueue_defaults (three parameters, the table's defaults): its
    row is the one job_enqueue writes for the same call, and it wakes the queue."""
    columns = (
        "organization_id, queue, job_type, payload, idempotency_key, status, priority, run_at,"
        " attempts, max_attempts, created_at, concurrency_key, trace_parent, trace_state,"
        " unique_key, run_at = now() AND created_at = now()"
    )
    enqueue_module = importlib.import_module("jobs.enqueue")
    params = enqueue_module._params(
        "send", {"n": 1}, "mail", None, None, None, 0, None, None, None, "keep", None
    )
    assert enqueue_module._insert_query(params) == jobs_query("job_enqueue_defaults")
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN tockwork_jobs")
        with psycopg.connect(db_url) as c, c.transaction():
            fast = jobs.enqueue(c, "send", {"n": 1}, queue="mail")
            general = c.execute(jobs_query("job_enqueue"), params).fetchone()
            assert general is not None
            rows = [
                c.execute(f"SELECT {columns} FROM jobs_all WHERE id = %s", (i,)).fetchone()  # noqa: S608
                for i in (fast.id, general[0])
            ]
        notes = [n.payload for n in listener.notifies(timeout=0.5)]
    assert fast.created
    assert rows[0] == rows[1]
    assert rows[0] is not None and rows[0][-1] is True and rows[0][9] == DEFAULT_MAX_ATTEMPTS
    assert notes == ["mail"]


def test_enqueue_many_wakes_each_ready_queue_once_the_rows_are_visible(db_url: str) -> None:
    """The wake-up of enqueue_many goes with its id allocation when the caller is in a
    transaction (NOTIFY waits for the commit): none before the commit, one per queue with a job
    ready now (the earliest run_at of the queue decides), none for a queue whose jobs are all
    later. On an autocommit connection the wake-up follows the rows, which are visible when it
    arrives."""
    later = datetime(2099, 1, 1, tzinfo=UTC)
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN tockwork_jobs")
        with psycopg.connect(db_url) as c:
            jobs.enqueue_many(
                c,
                [
                    JobSpec("a", {}, queue="alpha"),
                    JobSpec("b", {}, queue="beta", run_at=later),
                    JobSpec("b", {}, queue="beta", run_at=T0),
                    JobSpec("g", {}, queue="gamma", run_at=later),
                    JobSpec("a", {}, queue="alpha", run_at=later),
                ],
            )
            assert [n.payload for n in listener.notifies(timeout=0.3)] == []
            c.commit()
        assert sorted(n.payload for n in listener.notifies(timeout=0.5)) == ["alpha", "beta"]
        with psycopg.connect(db_url, autocommit=True) as c:
            jobs.enqueue_many(c, [JobSpec("d", {}, queue="delta")])
        notes = [n.payload for n in listener.notifies(timeout=0.5, stop_after=1)]
        assert notes == ["delta"]
        assert count(db_url, "queue = 'delta'") == 1


def test_enqueue_async_in_transaction(db_url: str) -> None:
    async def scenario() -> tuple[jobs.Enqueued, jobs.Enqueued]:
        async with await psycopg.AsyncConnection.connect(db_url) as c:
            async with c.transaction():
                first = await jobs.enqueue_async(c, "remind", {}, idempotency_key="x")
            async with c.transaction(force_rollback=True):
                await jobs.enqueue_async(c, "remind", {}, idempotency_key="rolled-back")
            second = await jobs.enqueue_async(c, "remind", {}, idempotency_key="x")
            await c.commit()
            return first, second

    first, second = asyncio.run(scenario())
    assert first.created and not second.created and first.id == second.id
    assert count(db_url) == 1


def test_enqueue_many_without_keys_copies_in_order(conn: psycopg.Connection[Any]) -> None:
    later = T0 + timedelta(hours=1)
    specs = [
        JobSpec("t", {"i": i}, queue="q" if i % 2 else "r", run_at=later if i == 3 else None)
        for i in range(1000)
    ]
    out = jobs.enqueue_many(conn, specs, now=T0)
    assert all(r.created for r in out)
    rows = dict(
        (job_id, (payload["i"], queue, run_at, created_at))
        for job_id, payload, queue, run_at, created_at in conn.execute(
            "SELECT id, payload, queue, run_at, created_at FROM jobs_all"
        ).fetchall()
    )
    assert [rows[r.id][0] for r in out] == list(range(1000))  # ids match the specs' order
    assert rows[out[3].id][2] == later
    assert rows[out[4].id][1:] == ("r", T0, T0)


def test_enqueue_many_with_keys_taken_in_the_table_falls_back_inside_the_transaction(
    db_url: str,
) -> None:
    """No key repeats within the batch, so it is copied first; the COPY hits the taken key,
    its savepoint is rolled back, and the batch goes through the conflict-tolerant insert.
    The caller's earlier work in the same transaction stays, and nothing commits early."""
    with psycopg.connect(db_url) as c:
        taken = jobs.enqueue(c, "remind", {"n": 0}, idempotency_key="k2").id
        c.commit()
        before = jobs.enqueue(c, "other", {"before": True}).id  # opens the transaction
        specs = [JobSpec("remind", {"n": i}, idempotency_key=f"k{i}") for i in range(5)]
        out = jobs.enqueue_many(c, specs)
        assert [r.created for r in out] == [True, True, False, True, True]
        assert out[2].id == taken
        assert len({r.id for r in out}) == 5
        assert count(db_url) == 1  # nothing committed yet: the savepoint did not commit
        c.commit()
        rows: dict[int, Any] = dict(c.execute("SELECT id, payload FROM jobs_all").fetchall())
    assert rows[before] == {"before": True}
    assert rows[taken] == {"n": 0}  # the first job keeps its payload
    assert {rows[r.id]["n"] for r in out} == {0, 1, 3, 4}
    assert count(db_url) == 6


def test_enqueue_many_with_keys_on_an_idle_connection_commits_with_the_caller(
    db_url: str,
) -> None:
    """A keyed batch on a connection with no transaction open yet: the COPY's savepoint must not
    be an outer transaction of its own (which would commit the jobs before the caller does)."""
    with psycopg.connect(db_url) as c:
        jobs.enqueue_many(c, [JobSpec("remind", {}, idempotency_key=f"k{i}") for i in range(3)])
        assert count(db_url) == 0
        c.rollback()
        assert count(db_url) == 0
    with psycopg.connect(db_url, autocommit=True) as c:
        out = jobs.enqueue_many(
            c, [JobSpec("remind", {}, idempotency_key=f"k{i}") for i in range(3)]
        )
        again = jobs.enqueue_many(c, [JobSpec("remind", {}, idempotency_key="k1")])
    assert all(r.created for r in out)
    assert again == [jobs.Enqueued(id=out[1].id, created=False)]
    assert count(db_url) == 3


def test_concurrent_enqueue_many_of_the_same_keys_get_one_job_per_key(db_url: str) -> None:
    """Eight transactions copy the same 300 keys at once: each waits on the first holder of a
    key, falls back, and finds it; every caller gets the same ids, none sees an error."""
    barrier = threading.Barrier(8)
    results: list[list[jobs.Enqueued]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    specs = [JobSpec("remind", {"i": i}, idempotency_key=f"herd:{i}") for i in range(300)]

    def enqueuer() -> None:
        try:
            with psycopg.connect(db_url) as c:
                with c.transaction():
                    barrier.wait(timeout=10)
                    out = jobs.enqueue_many(c, specs)
                    c.execute("SELECT pg_sleep(0.02)")  # others wait on our rows
                with lock:
                    results.append(out)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=enqueuer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 8
    assert len({tuple(r.id for r in out) for out in results}) == 1
    assert [sum(out[i].created for out in results) for i in range(300)] == [1] * 300
    assert count(db_url) == 300


def test_enqueue_many_with_every_column_set(conn: psycopg.Connection[Any]) -> None:
    """The binary COPY of all columns (keys, organization, priority, run_at, max_attempts)."""
    org = uuid.uuid4()
    later = T0 + timedelta(minutes=5)
    specs = [
        JobSpec("remind", {"i": 0}, queue="q", idempotency_key="a", organization_id=org,
                run_at=later, priority=-3, max_attempts=2),
        JobSpec("remind", {"i": 1, "é": "\t\\"}, idempotency_key="b", organization_id=str(org)),
        JobSpec("plain", [1, 2.5, None]),
    ]  # fmt: skip
    out = jobs.enqueue_many(conn, specs, now=T0)
    rows: dict[int, tuple[Any, ...]] = {
        row[0]: row[1:]
        for row in conn.execute(
            "SELECT id, organization_id, queue, job_type, payload, idempotency_key, priority,"
            " run_at, max_attempts, created_at FROM jobs_all"
        ).fetchall()
    }
    assert rows[out[0].id] == (org, "q", "remind", {"i": 0}, "a", -3, later, 2, T0)
    assert rows[out[1].id] == (org, "default", "remind", {"i": 1, "é": "\t\\"}, "b", 0, T0, 10, T0)
    assert rows[out[2].id] == (None, "default", "plain", [1, 2.5, None], None, 0, T0, 10, T0)
