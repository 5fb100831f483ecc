"""The SQLAlchemy 2 adapter on the real package and database: a job commits with the session's
transaction and vanishes with its rollback, sync and async, and a schedule joins it too."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import jobs
from jobs.integrations import sqlalchemy as tw
from scheduler import create_schedule, create_schedule_async, list_schedules


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(db_url))
    with eng.begin() as conn:
        conn.execute(text("CREATE TABLE users (id serial PRIMARY KEY, name text)"))
    yield eng
    eng.dispose()


def _jobs(db_url: str) -> list[Any]:
    with psycopg.connect(db_url) as conn:
        return [
            (j.job_type, j.payload) for j in jobs.list_jobs(conn, statuses=list(jobs.JobStatus))
        ]


def test_enqueue_commits_with_the_session(engine: Engine, db_url: str) -> None:
    with Session(engine) as session, session.begin():
        session.execute(text("INSERT INTO users (name) VALUES ('ada')"))
        tw.enqueue(session, "send_welcome", {"user": "ada"})
        tw.enqueue_many(session, [jobs.JobSpec("send_welcome", {"user": n}) for n in "bc"])
        assert _jobs(db_url) == []  # not visible before the session commits
    assert sorted(p["user"] for _, p in _jobs(db_url)) == ["ada", "b", "c"]


def test_rollback_leaves_no_job_and_no_row(engine: Engine, db_url: str) -> None:
    with Session(engine) as session:
        session.execute(text("INSERT INTO users (name) VALUES ('bob')"))
        tw.enqueue(session, "send_welcome", {"user": "bob"})
        session.rollback()
    assert _jobs(db_url) == []
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM users")).scalar() == 0


def test_a_schedule_joins_the_session(engine: Engine, db_url: str) -> None:
    with Session(engine) as session:
        create_schedule(
            tw.connection(session), job_type="remind", rule="daily@08:00", zone="Europe/Paris"
        )
        session.rollback()
    with Session(engine) as session, session.begin():
        create_schedule(
            tw.connection(session), job_type="remind", rule="daily@09:00", zone="Europe/Paris"
        )
    with psycopg.connect(db_url) as conn:
        assert [str(s.rule) for s in list_schedules(conn)] == ["daily@09:00"]


def test_a_connection_works_too(engine: Engine, db_url: str) -> None:
    with engine.begin() as conn:
        tw.enqueue(conn, "t", {"n": 1})
    assert _jobs(db_url) == [("t", {"n": 1})]


def test_the_async_session(db_url: str) -> None:
    async def run() -> None:
        eng = create_async_engine(
            "postgresql+psycopg://",
            async_creator=lambda: psycopg.AsyncConnection.connect(db_url),
        )
        try:
            async with AsyncSession(eng) as session, session.begin():
                await tw.enqueue_async(session, "send_welcome", {"user": "async"})
                await tw.enqueue_many_async(
                    session, [jobs.JobSpec("digest", {"user": n}) for n in "xy"]
                )
            async with AsyncSession(eng) as session:
                await tw.enqueue_async(session, "send_welcome", {"user": "gone"})
                await tw.enqueue_many_async(session, [jobs.JobSpec("digest", {"user": "gone"})])
                await session.rollback()
        finally:
            await eng.dispose()

    asyncio.run(run())
    assert sorted(_jobs(db_url), key=str) == [
        ("digest", {"user": "x"}),
        ("digest", {"user": "y"}),
        ("send_welcome", {"user": "async"}),
    ]


def _rules(db_url: str) -> list[str]:
    with psycopg.connect(db_url) as conn:
        return [str(s.rule) for s in list_schedules(conn)]


def test_an_async_schedule_joins_the_async_session_and_connection(db_url: str) -> None:
    """create_schedule_async on the adapter's connection runs in the AsyncSession's (and an
    AsyncConnection's) transaction: invisible before the commit, gone with a rollback, there
    once after a commit, next to the session's own row."""
    seen_before_commit: list[str] = []

    async def remind(on: AsyncSession | AsyncConnection, rule: str) -> None:
        conn = await tw.async_connection(on)
        await create_schedule_async(conn, job_type="remind", rule=rule, zone="Asia/Tokyo")

    async def run() -> None:
        eng = create_async_engine(
            "postgresql+psycopg://",
            async_creator=lambda: psycopg.AsyncConnection.connect(db_url),
        )
        try:
            async with eng.begin() as conn:
                await conn.execute(text("CREATE TABLE users (id serial PRIMARY KEY, name text)"))
            async with AsyncSession(eng) as session:
                await session.execute(text("INSERT INTO users (name) VALUES ('gone')"))
                await remind(session, "daily@07:00")
                await session.rollback()
            async with AsyncSession(eng) as session, session.begin():
                await session.execute(text("INSERT INTO users (name) VALUES ('ada')"))
                await remind(session, "daily@08:00")
                seen_before_commit.extend(_rules(db_url))
            async with eng.connect() as conn:
                await remind(conn, "daily@09:00")
                await conn.rollback()
            async with eng.begin() as conn:
                await remind(conn, "daily@10:00")
        finally:
            await eng.dispose()

    asyncio.run(run())
    assert seen_before_commit == []
    assert _rules(db_url) == ["daily@08:00", "daily@10:00"]
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT array_agg(name) FROM users").fetchone() == (["ada"],)


def test_other_drivers_and_objects_are_refused(db_url: str) -> None:
    with pytest.raises(jobs.InvalidJob, match="session"):
        tw.connection("not a session")  # type: ignore[arg-type]
    eng = create_engine("sqlite://")
    with Session(eng) as session, pytest.raises(jobs.InvalidJob, match="psycopg 3 dialect"):
        tw.enqueue(session, "t")
    with pytest.raises(jobs.InvalidJob, match="AsyncSession"):
        asyncio.run(tw.async_connection("not a session"))  # type: ignore[arg-type]
    with pytest.raises(jobs.InvalidJob, match="AsyncSession"):
        asyncio.run(tw.async_connection(Session(eng)))  # type: ignore[arg-type]
