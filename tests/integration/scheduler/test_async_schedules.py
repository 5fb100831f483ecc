"""The async schedule API (issue 11) against its sync twin, on a real PostgreSQL.

Each ``*_async`` function must give what the sync one gives for the same input at the same
pinned instant (same rows, same next occurrence, same supersede records) and refuse bad input
with the same typed error naming the same field, writing nothing. A rolled-back async
transaction leaves no schedule; a schedule created in an async transaction (as a FastAPI
endpoint would) is delivered by the sync scheduler and worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest

import scheduler
from jobs import Worker
from jobs.store import PgJobStore
from scheduler import InvalidSchedule, Schedule, Scheduler
from scheduler.reminders import SimulatedPush, reminder_handler, still_due, still_due_async
from timezones import FrozenClock

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
SAT_0758 = datetime(2026, 3, 7, 7, 58, tzinfo=UTC)
SAT_0800 = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)

R = TypeVar("R")


def run(db_url: str, fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[R]]) -> R:
    """Run ``fn`` on a fresh AsyncConnection inside one transaction, committed at the end."""

    async def scenario() -> R:
        async with await psycopg.AsyncConnection.connect(db_url) as c, c.transaction():
            return await fn(c)

    return asyncio.run(scenario())


def view(s: Schedule) -> dict[str, Any]:
    """A schedule without its identity (id) and its row timestamps."""
    fields = dataclasses.asdict(s)
    for name in ("id", "created_at", "updated_at", "_rule"):
        fields.pop(name)
    return fields


def tick(db_url: str, now: datetime) -> scheduler.TickResult:
    s = Scheduler(db_url, clock=FrozenClock(now), lookahead=timedelta(minutes=5))
    try:
        return s.tick()
    finally:
        s.close()


def count_schedules(db_url: str) -> int:
    with psycopg.connect(db_url) as c:
        row = c.execute("SELECT count(*) FROM schedules").fetchone()
        assert row is not None
        return int(row[0])


ARGS: dict[str, Any] = {
    "job_type": "remind",
    "rule": "daily@08:00",
    "zone": "America/Chicago",
    "subject": "user-1",
    "payload": {"message": "stretch"},
    "quiet_hours": {"start": "22:00", "end": "07:00"},
}


def test_create_and_read_match_the_sync_twin(conn: psycopg.Connection[Any], db_url: str) -> None:
    sync = scheduler.create_schedule(conn, now=T0, **ARGS)
    conn.commit()

    async def create(c: psycopg.AsyncConnection[Any]) -> tuple[Schedule, Schedule, Schedule]:
        made = await scheduler.create_schedule_async(c, now=T0, **{**ARGS, "subject": "user-2"})
        again = await scheduler.get_schedule_async(c, made.id)
        keyed = await scheduler.create_schedule_async(
            c, job_type="retention", rule="cron:0 3 * * *", zone="UTC", key="retention", now=T0
        )
        return made, again, keyed

    made, again, keyed = run(db_url, create)
    assert made == again
    assert view(made) == {**view(sync), "subject": "user-2"}
    assert made.next_run_at == datetime(2026, 3, 6, 14, 0, tzinfo=UTC)
    assert keyed.catch_up == "all"
    by_key = run(db_url, lambda c: scheduler.get_schedule_async(c, key="retention"))
    assert by_key == scheduler.get_schedule(conn, key="retention")
    for filters in ({}, {"subject": "user-2"}, {"organization_id": None}, {"source": "api"}):
        got = run(db_url, lambda c, f=filters: scheduler.list_schedules_async(c, **f))  # type: ignore[misc]
        assert got == scheduler.list_schedules(conn, **filters)
    assert len(run(db_url, lambda c: scheduler.list_schedules_async(c, subject="user-2"))) == 1
    with pytest.raises(scheduler.ScheduleExists):
        run(db_url, lambda c: scheduler.create_schedule_async(
            c, key="retention", job_type="retention", rule="cron:0 4 * * *", zone="UTC",
        ))  # fmt: skip
    with pytest.raises(scheduler.ScheduleNotFound):
        run(db_url, lambda c: scheduler.get_schedule_async(c, 10**9))


def test_rollback_of_the_async_transaction_leaves_nothing(db_url: str) -> None:
    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(db_url) as c:
            async with c.transaction(force_rollback=True):
                await scheduler.create_schedule_async(c, now=T0, **ARGS)
                await scheduler.create_schedules_async(c, [ARGS, ARGS], now=T0)
                assert count_schedules(db_url) == 0  # not visible before commit
            cur = await c.execute("SELECT count(*) FROM schedules")
            assert await cur.fetchone() == (0,)

    asyncio.run(scenario())
    assert count_schedules(db_url) == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"zone": "America/Chicgo"}, "zone"),
        ({"rule": "daily@25:00"}, "rule"),
        ({"rule": "cron:0 0 31 2 *"}, "rule"),
        ({"catch_up": "sometimes"}, "catch_up"),
        ({"quiet_hours": {"start": "22:00", "end": "7am"}}, "quiet_hours.end"),
        ({"jitter": -5}, "jitter"),
        ({"payload": [1, 2]}, "payload"),
        ({"organization_id": "not-a-uuid"}, "organization_id"),
        ({"now": datetime(2026, 3, 6, 12, 0)}, "now"),
    ],
)
def test_bad_input_is_refused_like_the_sync_twin(
    conn: psycopg.Connection[Any], db_url: str, kwargs: dict[str, Any], field: str
) -> None:
    args: dict[str, Any] = {"job_type": "r", "rule": "daily@08:00", "zone": "UTC", "now": T0}
    args.update(kwargs)
    with pytest.raises(InvalidSchedule) as sync_info:
        scheduler.create_schedule(conn, **args)
    conn.rollback()
    with pytest.raises(InvalidSchedule) as async_info:
        run(db_url, lambda c: scheduler.create_schedule_async(c, **args))
    assert async_info.value.field == sync_info.value.field == field
    assert str(async_info.value) == str(sync_info.value)
    item = {name: value for name, value in args.items() if name != "now"}
    now = args["now"]
    with pytest.raises(InvalidSchedule) as sync_bulk:
        scheduler.create_schedules(conn, [ARGS, item], now=now)
    conn.rollback()
    with pytest.raises(InvalidSchedule) as bulk:
        run(db_url, lambda c: scheduler.create_schedules_async(c, [ARGS, item], now=now))
    assert bulk.value.field == sync_bulk.value.field
    assert bulk.value.field == ("now" if field == "now" else f"items[1].{field}")
    assert count_schedules(db_url) == 0


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: scheduler.get_schedule_async(c, 0), "schedule_id"),
        (lambda c: scheduler.get_schedule_async(c, None), "key"),
        (lambda c: scheduler.list_schedules_async(c, limit=0), "limit"),
        (lambda c: scheduler.update_schedule_async(c, 1, key="k"), "key"),
        (lambda c: scheduler.update_schedule_async(c, 1, zone="Mars/Base"), "zone"),
        (lambda c: scheduler.pause_async(c, True), "schedule_id"),
        (lambda c: scheduler.resume_async(c, 1, now=datetime(2026, 1, 1)), "now"),
        (lambda c: scheduler.delete_async(c, -1), "schedule_id"),
        (
            lambda c: scheduler.create_schedules_async(c, "not a list"),  # type: ignore[arg-type]
            "items",
        ),
    ],
)
def test_bad_arguments_name_the_field(
    db_url: str, call: Callable[[psycopg.AsyncConnection[Any]], Awaitable[Any]], field: str
) -> None:
    with pytest.raises(InvalidSchedule) as info:
        run(db_url, call)
    assert info.value.field == field


def test_update_pause_resume_delete_match_the_sync_twin(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """Two identical schedules, one driven by the sync API and one by the async API at the
    same instants: after each step they are equal but for their id, and so are the jobs and
    supersede records each leaves."""
    base: dict[str, Any] = {
        "job_type": "r",
        "rule": "daily@08:00",
        "zone": "Europe/Berlin",
        "now": T0,
    }
    sid = scheduler.create_schedule(conn, subject="a", **base).id
    conn.commit()
    aid = run(db_url, lambda c: scheduler.create_schedule_async(c, subject="a2", **base)).id
    # Saturday 08:00 Berlin (07:00Z) is enqueued ahead for both.
    assert tick(db_url, datetime(2026, 3, 7, 6, 58, tzinfo=UTC)).enqueued == 2
    steps: list[tuple[str, dict[str, Any], datetime]] = [
        ("update", {"zone": "America/New_York"}, datetime(2026, 3, 7, 6, 59, tzinfo=UTC)),
        ("update", {"payload": {"x": 1}, "catch_up": None}, datetime(2026, 3, 7, 7, 0, tzinfo=UTC)),
        ("pause", {}, datetime(2026, 3, 7, 9, 0, tzinfo=UTC)),
        ("pause", {}, datetime(2026, 3, 7, 9, 1, tzinfo=UTC)),
        ("resume", {}, datetime(2026, 3, 9, 9, 0, tzinfo=UTC)),
    ]
    for name, changes, at in steps:
        sync_fn = {"update": scheduler.update_schedule, "pause": scheduler.pause,
                   "resume": scheduler.resume}[name]  # fmt: skip
        async_fn = {"update": scheduler.update_schedule_async, "pause": scheduler.pause_async,
                    "resume": scheduler.resume_async}[name]  # fmt: skip
        s = sync_fn(conn, sid, now=at, **changes)
        conn.commit()
        a = run(db_url, lambda c, f=async_fn, at=at, ch=changes: f(c, aid, now=at, **ch))  # type: ignore[misc]
        # last_job_id names each one's own job.
        assert {**view(a), "subject": "a", "last_job_id": None} == {
            **view(s),
            "last_job_id": None,
        }, name
    rows = conn.execute(
        "SELECT s.subject, j.status, j.idempotency_key LIKE '%~superseded:v1'"
        " FROM jobs_all j JOIN schedules s ON j.idempotency_key LIKE 'schedule:' || s.id || ':%'"
        " ORDER BY s.subject"
    ).fetchall()
    assert rows == [("a", "cancelled", True), ("a2", "cancelled", True)]
    skips = conn.execute(
        "SELECT schedule_id, kind, occurrence_key FROM schedule_skips ORDER BY schedule_id"
    ).fetchall()
    assert [r[1:] for r in skips] == [("superseded", "2026-03-07T08:00")] * 2
    assert run(db_url, lambda c: scheduler.delete_async(c, aid, now=T0 + timedelta(days=5)))
    assert not run(db_url, lambda c: scheduler.delete_async(c, aid))
    with pytest.raises(scheduler.ScheduleNotFound):
        scheduler.get_schedule(conn, aid)


def test_create_schedules_async_matches_create_schedules(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    items = [{**ARGS, "subject": f"u{i}"} for i in range(3)]
    sync_ids = scheduler.create_schedules(conn, items, now=T0)
    conn.rollback()
    async_ids = run(db_url, lambda c: scheduler.create_schedules_async(c, items, now=T0))
    assert len(async_ids) == len(sync_ids) == 3
    made = scheduler.list_schedules(conn)
    assert [s.id for s in made] == async_ids
    assert [s.subject for s in made] == ["u0", "u1", "u2"]
    keyed = [{**ARGS, "key": "k"}, {**ARGS, "key": "k"}]
    with pytest.raises(scheduler.ScheduleExists):
        run(db_url, lambda c: scheduler.create_schedules_async(c, keyed, now=T0))
    assert run(db_url, lambda c: scheduler.create_schedules_async(c, [])) == []


def leased_job(db_url: str, now: datetime) -> Any:
    with psycopg.connect(db_url, autocommit=True) as c:
        (job,) = PgJobStore(c).claim({"default": 1}, "test", timedelta(seconds=30), now)
    return job


def test_still_due_async_matches_still_due(conn: psycopg.Connection[Any], db_url: str) -> None:
    s = scheduler.create_schedule(
        conn, job_type="reminder", rule="daily@08:00", zone="UTC", subject="u1", now=T0
    )
    conn.commit()
    tick(db_url, SAT_0758)
    job = leased_job(db_url, SAT_0800)
    assert run(db_url, lambda c: still_due_async(c, job, now=SAT_0800))
    assert still_due(conn, job, now=SAT_0800)
    conn.rollback()
    run(db_url, lambda c: scheduler.update_schedule_async(
        c, s.id, rule="daily@09:00", now=SAT_0758 + timedelta(seconds=1)))  # fmt: skip
    due = run(db_url, lambda c: still_due_async(c, job, now=SAT_0800))
    assert (due.due, due.reason) == (False, "superseded")
    assert due == still_due(conn, job, now=SAT_0800)
    conn.commit()
    # Recorded once: by the async check; the sync check after it records nothing more.
    assert scheduler.get_schedule(conn, s.id).skipped_count == 1
    run(db_url, lambda c: scheduler.delete_async(c, s.id, now=SAT_0800))
    assert run(db_url, lambda c: still_due_async(c, job, now=SAT_0800)).reason == "deleted"


def test_a_schedule_created_in_an_async_transaction_is_delivered_by_the_worker(
    db_url: str,
) -> None:
    """The FastAPI flow: an endpoint creates a user's reminder in its async transaction; the
    replicated scheduler enqueues the occurrence and the sync worker delivers it once."""

    async def endpoint(c: psycopg.AsyncConnection[Any]) -> Schedule:
        return await scheduler.create_schedule_async(
            c, job_type="reminder", rule="daily@08:00", zone="UTC", subject="u1",
            payload={"subject": "u1", "message": "drink water"}, now=T0,
        )  # fmt: skip

    made = run(db_url, endpoint)
    assert tick(db_url, SAT_0758).enqueued == 1
    clock = FrozenClock(SAT_0800)
    handler = reminder_handler(db_url, SimulatedPush(), clock=clock)
    try:
        Worker(db_url, {"reminder": handler}, clock=clock, listen=False).run_until_idle()
    finally:
        handler.close()
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT subject, message FROM simulated_pushes").fetchall()
        assert rows == [("u1", "drink water")]
        assert c.execute("SELECT status FROM jobs_all").fetchall() == [("succeeded",)]
    assert run(db_url, lambda c: scheduler.get_schedule_async(c, made.id)).enqueued_count == 1


@pytest.mark.parametrize(
    "name",
    [
        "create_schedule",
        "create_schedules",
        "update_schedule",
        "pause",
        "resume",
        "delete",
        "get_schedule",
        "list_schedules",
    ],
)
def test_each_async_twin_takes_the_sync_parameters(name: str) -> None:
    import inspect

    sync = inspect.signature(getattr(scheduler, name)).parameters
    twin = inspect.signature(getattr(scheduler, f"{name}_async")).parameters
    assert [(p.name, p.kind, p.default) for p in twin.values()] == [
        (p.name, p.kind, p.default) for p in sync.values()
    ]
    assert inspect.iscoroutinefunction(getattr(scheduler, f"{name}_async"))
