"""Unique while active against a real PostgreSQL: keep or replace, races, batches, requeue.

Invariant (jobs_unique_active_uq): at most one job per (organization, job type, unique key) is
pending, retrying or leased; the key is free again once that job succeeded, went dead or was
cancelled. Every path into an active status respects it without a unique violation: enqueue
(sync and async, one job or a batch) through ON CONFLICT, requeue by skipping and reporting.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import JobSpec
from scheduler.cli import main
from scheduler.dashboard import views
from tests.locks import wait_for_lock_wait
from timezones.clock import FrozenClock

T0 = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)
ORG = uuid.UUID("6f1c2d58-0000-4000-8000-000000000001")
ACTIVE = "status IN ('pending', 'retrying', 'leased')"


def rows(conn: psycopg.Connection[Any], where: str = "true") -> list[tuple[Any, ...]]:
    sql = f"SELECT id, status, payload FROM jobs_all WHERE {where} ORDER BY id"  # noqa: S608
    return [tuple(r) for r in conn.execute(sql).fetchall()]


def set_status(conn: psycopg.Connection[Any], job_id: int, status: str) -> None:
    """Put a job in a state the test needs (a lease as a claim leaves it, or an end state)."""
    conn.execute(
        "UPDATE jobs SET status = %s,"
        " locked_until = CASE WHEN %s = 'leased' THEN %s::timestamptz + interval '30 s' END,"
        " completed_at = CASE WHEN %s IN ('dead', 'cancelled', 'succeeded') THEN %s END"
        " WHERE id = %s",
        (status, status, T0, status, T0, job_id),
    )


# -- keep and replace ---------------------------------------------------------------------------


def test_keep_returns_the_active_job(conn: psycopg.Connection[Any]) -> None:
    first = jobs.enqueue(conn, "stats", {"v": 1}, unique_key="stats:42", now=T0)
    again = [jobs.enqueue(conn, "stats", {"v": n}, unique_key="stats:42", now=T0) for n in (2, 3)]
    assert first.created and not first.replaced
    assert [(r.id, r.created, r.replaced) for r in again] == [(first.id, False, False)] * 2
    assert rows(conn) == [(first.id, "pending", {"v": 1})]


def test_replace_updates_a_waiting_job(conn: psycopg.Connection[Any]) -> None:
    first = jobs.enqueue(conn, "stats", {"v": 1}, unique_key="k", run_at=T0 + timedelta(hours=1))
    later = T0 + timedelta(minutes=5)
    r = jobs.enqueue(
        conn,
        "stats",
        {"v": 2},
        unique_key="k",
        on_active="replace",
        run_at=later,
        priority=7,
        max_attempts=3,
    )
    assert (r.id, r.created, r.replaced) == (first.id, False, True)
    row = conn.execute(
        "SELECT payload, run_at, priority, max_attempts, attempts, status FROM jobs_all"
    ).fetchall()
    assert row == [({"v": 2}, later, 7, 3, 0, "pending")]


def test_replace_updates_a_retrying_job_and_keeps_its_attempts(
    conn: psycopg.Connection[Any],
) -> None:
    job_id = jobs.enqueue(conn, "stats", {"v": 1}, unique_key="k", now=T0).id
    conn.execute(
        "UPDATE jobs SET status = 'retrying', attempts = 2, run_at = %s WHERE id = %s",
        (T0 + timedelta(hours=1), job_id),
    )
    r = jobs.enqueue(conn, "stats", {"v": 2}, unique_key="k", on_active="replace", now=T0)
    assert (r.id, r.replaced) == (job_id, True)
    assert conn.execute("SELECT payload, run_at, attempts, status FROM jobs_all").fetchall() == [
        ({"v": 2}, T0, 2, "retrying")
    ]


def test_replace_leaves_a_running_job_alone_and_does_not_lock_it(db_url: str) -> None:
    """A leased job has been handed to its handler: its payload stays, nothing is enqueued,
    and the enqueuer's open transaction holds no lock on it (the worker's completion or
    heartbeat must not wait for the enqueuer's commit)."""
    with psycopg.connect(db_url, autocommit=True) as setup:
        job_id = jobs.enqueue(setup, "stats", {"v": 1}, unique_key="k", now=T0).id
        set_status(setup, job_id, "leased")
    with psycopg.connect(db_url) as enqueuer, psycopg.connect(db_url) as worker:
        r = jobs.enqueue(enqueuer, "stats", {"v": 2}, unique_key="k", on_active="replace")
        assert (r.id, r.created, r.replaced) == (job_id, False, False)
        # NOWAIT fails at once if the enqueuer's transaction (still open) locked the row.
        locked = worker.execute(
            "SELECT id FROM jobs WHERE id = %s FOR UPDATE NOWAIT", (job_id,)
        ).fetchall()
        assert locked == [(job_id,)]
        worker.rollback()
        enqueuer.commit()
        assert rows(enqueuer) == [(job_id, "leased", {"v": 1})]


def test_replace_locks_a_waiting_job_until_commit(db_url: str) -> None:
    """The control of the test above: a replaced waiting job is locked by the enqueuer, so the
    NOWAIT probe can tell a lock from none."""
    with psycopg.connect(db_url, autocommit=True) as setup:
        job_id = jobs.enqueue(setup, "stats", {"v": 1}, unique_key="k", now=T0).id
    with psycopg.connect(db_url) as enqueuer, psycopg.connect(db_url) as other:
        assert jobs.enqueue(
            enqueuer, "stats", {"v": 2}, unique_key="k", on_active="replace"
        ).replaced
        with pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE NOWAIT", (job_id,))
        enqueuer.rollback()


def test_scope_is_organization_job_type_and_key(conn: psycopg.Connection[Any]) -> None:
    made = [
        jobs.enqueue(conn, "stats", unique_key="k"),
        jobs.enqueue(conn, "stats", unique_key="k", organization_id=ORG),
        jobs.enqueue(conn, "stats", unique_key="k", organization_id=str(ORG)),
        jobs.enqueue(conn, "other", unique_key="k"),
        jobs.enqueue(conn, "stats", unique_key="k2"),
        jobs.enqueue(conn, "stats", unique_key="k"),
    ]
    assert [r.created for r in made] == [True, True, False, True, True, False]
    assert made[2].id == made[1].id and made[5].id == made[0].id


def test_an_idempotency_key_of_the_same_text_is_another_thing(
    conn: psycopg.Connection[Any],
) -> None:
    a = jobs.enqueue(conn, "stats", idempotency_key="k")
    b = jobs.enqueue(conn, "stats", unique_key="k")
    assert a.created and b.created and a.id != b.id


def test_the_key_is_free_again_after_success_dead_and_cancel(db_url: str) -> None:
    clock = FrozenClock(T0)

    def handler(job: jobs.Job) -> None:
        if job.payload["n"] == 1:
            raise jobs.PermanentError("no")

    with psycopg.connect(db_url, autocommit=True) as conn:
        ids = []
        for n, end in enumerate(("succeeded", "dead")):
            r = jobs.enqueue(conn, "stats", {"n": n}, unique_key="k", now=T0)
            assert r.created
            ids.append(r.id)
            worker = jobs.Worker(db_url, {"stats": handler}, clock=clock, listen=False)
            worker.run_until_idle()
            assert rows(conn, f"id = {r.id}")[0][1] == end
        r = jobs.enqueue(conn, "stats", {"n": 2}, unique_key="k", now=T0)
        assert r.created
        assert jobs.cancel(conn, ids=[r.id]) == [r.id]
        last = jobs.enqueue(conn, "stats", {"n": 3}, unique_key="k", now=T0)
        assert last.created and last.id not in (*ids, r.id)
        assert [s for _, s, _ in rows(conn)] == ["succeeded", "dead", "cancelled", "pending"]


def test_rollback_frees_the_key(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        with conn.transaction(force_rollback=True):
            assert jobs.enqueue(conn, "stats", unique_key="k").created
        assert jobs.enqueue(conn, "stats", unique_key="k").created
        conn.commit()


# -- races -------------------------------------------------------------------------------------


def _herd(
    db_url: str, call: Callable[[psycopg.Connection[Any], int], Any], n: int = 16
) -> list[Any]:
    """``n`` threads, each with its own connection, released at once by a barrier; each calls
    ``call`` in its own transaction and commits."""
    barrier = threading.Barrier(n)
    results: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        try:
            with psycopg.connect(db_url) as c:
                c.execute("SELECT 1")  # the transaction is open before the race starts
                barrier.wait(timeout=30)
                r = call(c, i)
                c.commit()
            with lock:
                results.append(r)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == n
    return results


@pytest.mark.parametrize("on_active", ["keep", "replace"])
def test_sixteen_concurrent_enqueuers_of_one_key_make_one_job(
    db_url: str, on_active: jobs.OnActive
) -> None:
    results: list[jobs.Enqueued] = _herd(
        db_url,
        lambda c, i: jobs.enqueue(
            c, "stats", {"from": i}, unique_key="herd", on_active=on_active, now=T0
        ),
    )
    assert len({r.id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    with psycopg.connect(db_url) as conn:
        (job,) = rows(conn)
    if on_active == "replace":
        # Every later enqueuer found the job waiting and replaced it; the last commit stands.
        assert sum(r.replaced for r in results) == 15
    else:
        assert not any(r.replaced for r in results)
    assert job[1] == "pending"


def test_concurrent_batches_of_the_same_unique_keys_make_one_job_per_key(db_url: str) -> None:
    keys = [f"u{k}" for k in range(50)]

    def batch(c: psycopg.Connection[Any], i: int) -> list[jobs.Enqueued]:
        order = keys if i % 2 else keys[::-1]
        specs = [
            JobSpec("stats", {"i": i}, unique_key=k, on_active="replace" if i % 3 else "keep")
            for k in order
        ]
        return jobs.enqueue_many(c, specs, now=T0)

    results = _herd(db_url, batch, n=8)
    with psycopg.connect(db_url) as conn:
        assert conn.execute(f"SELECT count(*) FROM jobs_all WHERE {ACTIVE}").fetchone() == (50,)  # noqa: S608
        by_key: dict[str, int] = dict(
            conn.execute("SELECT unique_key, id FROM jobs_all").fetchall()
        )
    for i, result in enumerate(sorted(results, key=len)):
        assert len(result) == 50, i
    created = sum(r.created for result in results for r in result)
    assert created == 50
    assert {r.id for result in results for r in result} == set(by_key.values())


# -- batches -----------------------------------------------------------------------------------


def test_enqueue_many_repeated_unique_keys_first_wins(conn: psycopg.Connection[Any]) -> None:
    taken = jobs.enqueue(conn, "stats", {"old": True}, unique_key="taken", now=T0).id
    waiting = jobs.enqueue(conn, "stats", {"old": True}, unique_key="swap", now=T0).id
    specs = [
        JobSpec("stats", {"n": 0}, unique_key="a"),
        JobSpec("stats", {"n": 1}),  # no key: a plain row in the same batch
        JobSpec("stats", {"n": 2}, unique_key="a", on_active="replace"),  # a repeat: first wins
        JobSpec("stats", {"n": 3}, idempotency_key="i"),
        JobSpec("stats", {"n": 4}, unique_key="taken"),
        JobSpec("stats", {"n": 5}, unique_key="swap", on_active="replace"),
        JobSpec("stats", {"n": 6}, idempotency_key="i"),
        JobSpec("stats", {"n": 7}, unique_key="a", organization_id=ORG),
    ]
    out = jobs.enqueue_many(conn, specs, now=T0)
    assert [(r.created, r.replaced) for r in out] == [
        (True, False),
        (True, False),
        (False, False),
        (True, False),
        (False, False),
        (False, True),
        (False, False),
        (True, False),
    ]
    assert out[2].id == out[0].id and out[6].id == out[3].id
    assert out[4].id == taken and out[5].id == waiting
    payloads = dict(conn.execute("SELECT id, payload FROM jobs_all").fetchall())
    assert payloads[out[0].id] == {"n": 0}
    assert payloads[taken] == {"old": True}
    assert payloads[waiting] == {"n": 5}
    assert len(payloads) == 6  # taken, swap and the four created


def test_enqueue_many_with_a_taken_key_stays_in_the_callers_transaction(db_url: str) -> None:
    """The batch never goes through COPY (which has no ON CONFLICT and would fail on the
    index, aborting the caller's transaction): a held key is just a result."""
    with psycopg.connect(db_url) as conn:
        held = jobs.enqueue(conn, "stats", unique_key="k").id
        out = jobs.enqueue_many(conn, [JobSpec("stats", unique_key="k"), JobSpec("stats")])
        assert out[0] == jobs.Enqueued(held, False)
        conn.rollback()
        assert rows(conn) == []


def test_enqueue_many_replace_wakes_the_queue_of_a_job_made_ready(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN tockwork_jobs")
        with psycopg.connect(db_url) as conn:
            jobs.enqueue(
                conn, "stats", queue="q1", unique_key="k", run_at=T0 + timedelta(days=1), now=T0
            )
            conn.commit()
            assert list(listener.notifies(timeout=0, stop_after=1)) == []
            out = jobs.enqueue_many(
                conn, [JobSpec("stats", queue="q2", unique_key="k", on_active="replace")], now=T0
            )
            assert out[0].replaced
            conn.commit()
        (note,) = listener.notifies(timeout=5, stop_after=1)
        assert note.payload == "q1"  # the job keeps its queue


# -- requeue -----------------------------------------------------------------------------------


def test_requeue_skips_a_dead_job_whose_key_an_active_job_holds(
    conn: psycopg.Connection[Any],
) -> None:
    dead = jobs.enqueue(conn, "stats", {"v": 1}, unique_key="k", now=T0).id
    plain = jobs.enqueue(conn, "stats", {"v": 0}, now=T0).id
    set_status(conn, dead, "dead")
    set_status(conn, plain, "dead")
    active = jobs.enqueue(conn, "stats", {"v": 2}, unique_key="k", now=T0).id
    result = jobs.requeue(conn, ids=[dead, plain], now=T0)
    assert isinstance(result, jobs.Requeued)
    assert result == [plain] and result.skipped == (dead,)
    assert [s for _, s, _ in rows(conn)] == ["dead", "pending", "pending"]
    # Once the holder is done, the dead job can come back.
    set_status(conn, active, "succeeded")
    again = jobs.requeue(conn, ids=[dead], now=T0)
    assert again == [dead] and again.skipped == ()


def test_requeue_of_two_jobs_with_one_key_brings_back_the_oldest(
    conn: psycopg.Connection[Any],
) -> None:
    ids = []
    for n in range(3):
        job_id = jobs.enqueue(conn, "stats", {"n": n}, unique_key="k", now=T0).id
        set_status(conn, job_id, "cancelled" if n == 2 else "dead")
        ids.append(job_id)
    result = jobs.requeue(conn, job_type="stats", statuses=["dead", "cancelled"], now=T0)
    assert result == [ids[0]] and result.skipped == (ids[1], ids[2])
    assert conn.execute(f"SELECT count(*) FROM jobs_all WHERE {ACTIVE}").fetchone() == (1,)  # noqa: S608


def test_requeue_racing_an_enqueue_of_the_key_skips_instead_of_failing(db_url: str) -> None:
    """The enqueue's holder is uncommitted when the requeue's statement takes its snapshot, so
    the statement's own check cannot see it: the index makes the requeue wait, then refuse;
    requeue rolls back to its savepoint, runs again and skips the job."""
    with psycopg.connect(db_url, autocommit=True) as setup:
        dead = jobs.enqueue(setup, "stats", unique_key="k", now=T0).id
        set_status(setup, dead, "dead")
    result: list[jobs.Requeued] = []
    errors: list[BaseException] = []
    with psycopg.connect(db_url) as enqueuer:
        holder = jobs.enqueue(enqueuer, "stats", unique_key="k", now=T0).id

        def requeue() -> None:
            try:
                with psycopg.connect(db_url, application_name="requeuer") as c:
                    result.append(jobs.requeue(c, ids=[dead], now=T0))
                    c.commit()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=requeue)
        thread.start()
        wait_for_lock_wait(db_url, "requeuer")
        enqueuer.commit()
        thread.join()
    assert errors == []
    assert result == [jobs.Requeued([], skipped=[dead])]
    assert result[0].skipped == (dead,)
    with psycopg.connect(db_url) as conn:
        assert rows(conn) == [(dead, "dead", {}), (holder, "pending", {})]


def test_requeue_racing_an_aborted_enqueue_requeues(db_url: str) -> None:
    """The control: the same race, but the holder rolls back, so the key is free."""
    with psycopg.connect(db_url, autocommit=True) as setup:
        dead = jobs.enqueue(setup, "stats", unique_key="k", now=T0).id
        set_status(setup, dead, "dead")
    result: list[jobs.Requeued] = []
    with psycopg.connect(db_url) as enqueuer:
        jobs.enqueue(enqueuer, "stats", unique_key="k", now=T0)

        def requeue() -> None:
            with psycopg.connect(db_url, application_name="requeuer") as c:
                result.append(jobs.requeue(c, ids=[dead], now=T0))
                c.commit()

        thread = threading.Thread(target=requeue)
        thread.start()
        wait_for_lock_wait(db_url, "requeuer")
        enqueuer.rollback()
        thread.join()
    assert result == [[dead]] and result[0].skipped == ()


def test_requeue_on_an_idle_connection_commits_with_the_caller(db_url: str) -> None:
    """The savepoint does not commit on its own: a rolled back caller requeued nothing."""
    with psycopg.connect(db_url) as conn:
        dead = jobs.enqueue(conn, "stats", unique_key="k", now=T0).id
        set_status(conn, dead, "dead")
        conn.commit()
        assert jobs.requeue(conn, ids=[dead], now=T0) == [dead]
        conn.rollback()
        assert rows(conn) == [(dead, "dead", {})]


def test_cli_requeue_reports_the_skipped(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        dead = [
            jobs.enqueue(conn, "stats", {"n": n}, unique_key=f"k{n}", now=T0).id for n in (0, 1)
        ]
        for job_id in dead:
            set_status(conn, job_id, "dead")
        jobs.enqueue(conn, "stats", unique_key="k0", now=T0)
    assert main(["jobs", "requeue", "--job-type", "stats", "--database-url", db_url]) == 0
    out = capsys.readouterr().out
    assert f"requeued 1 job(s): {dead[1]}" in out
    assert f"skipped 1 job(s) whose unique key an active job holds: {dead[0]}" in out
    # Asked for by id, a skipped job is a failure of the command, said in one line.
    with psycopg.connect(db_url, autocommit=True) as conn:
        set_status(conn, dead[1], "dead")
        jobs.enqueue(conn, "stats", unique_key="k1", now=T0)
    assert main(["jobs", "requeue", "--id", str(dead[1]), "--database-url", db_url]) == 1
    captured = capsys.readouterr()
    assert f"skipped 1 job(s) whose unique key an active job holds: {dead[1]}" in captured.out
    assert captured.err.count("\n") == 1 and "unique key" in captured.err


def test_dashboard_requeue_skips_without_failing(conn: psycopg.Connection[Any]) -> None:
    dead = jobs.enqueue(conn, "stats", unique_key="k", now=T0).id
    set_status(conn, dead, "dead")
    jobs.enqueue(conn, "stats", unique_key="k", now=T0)
    conn.commit()
    done = views.act_on_dead(conn, "requeue", [dead], actor="t", selection={"ids": [dead]}, now=T0)
    assert done == []
    assert rows(conn, f"id = {dead}")[0][1] == "dead"


# -- async -------------------------------------------------------------------------------------


def test_async_enqueue_keep_replace_batch_and_requeue(db_url: str) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(db_url) as c:
            first = await jobs.enqueue_async(c, "stats", {"v": 1}, unique_key="k", now=T0)
            kept = await jobs.enqueue_async(c, "stats", {"v": 2}, unique_key="k", now=T0)
            swapped = await jobs.enqueue_async(
                c, "stats", {"v": 3}, unique_key="k", on_active="replace", now=T0
            )
            assert first.created
            assert (kept.id, kept.created, kept.replaced) == (first.id, False, False)
            assert (swapped.id, swapped.replaced) == (first.id, True)
            out = await jobs.enqueue_many_async(
                c,
                [
                    JobSpec("stats", {"v": 4}, unique_key="k", on_active="replace"),
                    JobSpec("stats", {"v": 5}, unique_key="k2"),
                    JobSpec("stats", {"v": 6}, unique_key="k2"),
                    JobSpec("stats", {"v": 7}),
                ],
                now=T0,
            )
            assert [(r.created, r.replaced) for r in out] == [
                (False, True),
                (True, False),
                (False, False),
                (True, False),
            ]
            assert out[0].id == first.id and out[2].id == out[1].id
            cur = await c.execute("SELECT payload FROM jobs_all WHERE id = %s", (first.id,))
            assert await cur.fetchone() == ({"v": 4},)
            await c.execute(
                "INSERT INTO jobs (job_type, unique_key, status, completed_at)"
                " VALUES ('stats', 'k', 'dead', %s)",
                (T0,),
            )
            cur = await c.execute("SELECT id FROM jobs_all WHERE status = 'dead'")
            row = await cur.fetchone()
            assert row is not None
            result = await jobs.requeue_async(c, ids=[row[0]], now=T0)
            assert result == [] and result.skipped == (row[0],)

    asyncio.run(scenario())


def test_typed_job_options(conn: psycopg.Connection[Any]) -> None:
    @jobs.job("recompute")
    def recompute(user_id: int) -> None:
        pass

    unique = recompute.with_options(unique_key="stats:42", now=T0)
    first = unique.enqueue(conn, user_id=1)
    again = unique.with_options(on_active="replace").enqueue(conn, user_id=2)
    assert (again.id, again.replaced) == (first.id, True)
    spec = unique.spec(user_id=3)
    assert (spec.unique_key, spec.on_active) == ("stats:42", "keep")
    assert jobs.enqueue_many(conn, [spec]) == [jobs.Enqueued(first.id, False)]
    assert rows(conn) == [(first.id, "pending", {"user_id": 2})]
    with pytest.raises(jobs.InvalidJob) as info:
        recompute.with_options(on_active="always")  # type: ignore[arg-type]
    assert info.value.field == "on_active"
    with pytest.raises(jobs.InvalidJob) as info:
        unique.with_options(idempotency_key="i")
    assert info.value.field == "unique_key"


# -- bad input ---------------------------------------------------------------------------------

BAD: list[tuple[dict[str, Any], str]] = [
    ({"unique_key": ""}, "unique_key"),
    ({"unique_key": "k" * 513}, "unique_key"),
    ({"unique_key": 42}, "unique_key"),
    ({"unique_key": ["k"]}, "unique_key"),
    ({"unique_key": "a\x00b"}, "unique_key"),
    ({"unique_key": "k", "on_active": "always"}, "on_active"),
    ({"unique_key": "k", "on_active": None}, "on_active"),
    ({"unique_key": "k", "on_active": "KEEP"}, "on_active"),
    ({"on_active": "replace"}, "on_active"),
    ({"unique_key": "k", "idempotency_key": "k"}, "unique_key"),
    ({"unique_key": "k", "organization_id": "not-a-uuid"}, "organization_id"),
    ({"organization_id": "6f1c2d58"}, "organization_id"),
    ({"organization_id": 5}, "organization_id"),
]


@pytest.mark.parametrize(("kwargs", "field"), BAD)
def test_bad_input_on_every_entry_point_names_the_field_and_writes_nothing(
    db_url: str, kwargs: dict[str, Any], field: str
) -> None:
    @jobs.job("typed")
    def typed() -> None:
        pass

    async def run_async(call: str) -> object:
        async with await psycopg.AsyncConnection.connect(db_url) as c:
            if call == "enqueue_async":
                return await jobs.enqueue_async(c, "t", {}, **kwargs)
            return await jobs.enqueue_many_async(c, [JobSpec("t"), JobSpec("t", **kwargs)])

    calls: dict[str, tuple[Callable[[psycopg.Connection[Any]], object], str]] = {
        "enqueue": (lambda c: jobs.enqueue(c, "t", {}, **kwargs), field),
        "enqueue_many": (
            lambda c: jobs.enqueue_many(c, [JobSpec("t"), JobSpec("t", **kwargs)]),
            f"specs[1].{field}",
        ),
        "enqueue_many-mapping": (
            lambda c: jobs.enqueue_many(c, [{"job_type": "t", **kwargs}]),
            f"specs[0].{field}",
        ),
        "enqueue_async": (lambda c: asyncio.run(run_async("enqueue_async")), field),
        "enqueue_many_async": (lambda c: asyncio.run(run_async("many")), f"specs[1].{field}"),
        "typed": (lambda c: typed.with_options(**kwargs).enqueue(c), field),
    }
    if kwargs.get("on_active", "") is None:
        del calls["typed"]  # with_options takes None as "keep the definition's"
    with psycopg.connect(db_url) as conn:
        for name, (call, expected) in calls.items():
            with pytest.raises(jobs.InvalidJob) as info:
                call(conn)
            assert info.value.field == expected, name
            assert expected in str(info.value), name
        assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (0,)
