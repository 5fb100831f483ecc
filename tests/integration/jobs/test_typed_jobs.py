"""Typed job definitions against the real database: enqueue in the caller's transaction, run by
a worker, and a payload written by an untyped producer that does not fit goes dead (kept, with
its error, after it ran) instead of being retried forever."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import psycopg

import jobs
from timezones import FrozenClock

SEEN: list[tuple[int, str]] = []


@jobs.job("typed_welcome", queue="emails")
def welcome(user_id: int, locale: str = "en") -> None:
    SEEN.append((user_id, locale))


def test_enqueue_run_and_rollback(db_url: str) -> None:
    SEEN.clear()
    with psycopg.connect(db_url) as conn:
        welcome.enqueue(conn, 1)
        welcome.with_options(idempotency_key="w-2").enqueue(conn, user_id=2, locale="de")
        jobs.enqueue_many(conn, [welcome.spec(user_id=u) for u in (3, 4)])
    with psycopg.connect(db_url) as conn:
        welcome.enqueue(conn, 99)
        conn.rollback()  # the caller's transaction decides: no job
    stats = jobs.Worker(
        db_url, jobs.handlers(welcome), {"emails": 1}, listen=False
    ).run_until_idle()
    assert stats.outcomes == {"succeeded": 4}
    assert sorted(SEEN) == [(1, "en"), (2, "de"), (3, "en"), (4, "en")]


def test_an_untyped_payload_that_does_not_fit_is_dead_after_running(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        bad = jobs.enqueue(conn, "typed_welcome", {"user_id": "abc"}, queue="emails")
    stats = jobs.Worker(
        db_url, jobs.handlers(welcome), {"emails": 1}, listen=False
    ).run_until_idle()
    assert stats.outcomes == {"dead": 1}
    with psycopg.connect(db_url) as conn:
        record = jobs.get_job(conn, bad.id)
        attempts = jobs.job_attempts(conn, bad.id)
    assert record.status == "dead"
    assert record.last_error_code == "invalid_payload"
    assert "user_id" in (record.last_error_summary or "")
    assert len(attempts) == 1  # it ran once: dead with its error, and requeueable
    with psycopg.connect(db_url) as conn:
        assert jobs.requeue(conn, ids=[bad.id]) == [bad.id]


def test_enqueue_async(db_url: str) -> None:
    async def produce() -> Any:
        async with await psycopg.AsyncConnection.connect(db_url) as conn:
            return await welcome.enqueue_async(conn, user_id=5)

    enqueued = asyncio.run(produce())
    with psycopg.connect(db_url) as conn:
        assert jobs.get_job(conn, enqueued.id).payload == {"user_id": 5, "locale": "en"}


def test_with_options_now_pins_the_time(db_url: str) -> None:
    clock = FrozenClock(datetime(2030, 1, 1, tzinfo=UTC))
    with psycopg.connect(db_url) as conn:
        enqueued = welcome.with_options(now=clock.now()).enqueue(conn, 6)
        assert jobs.get_job(conn, enqueued.id).run_at == clock.now()
