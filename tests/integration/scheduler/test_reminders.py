"""Reminders at run time: still_due, the simulated push provider, the reminder handler."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
import scheduler
from jobs import Worker
from scheduler import Scheduler
from scheduler.reminders import SimulatedPush, reminder_handler, still_due
from timezones import FrozenClock

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
SAT_0758 = datetime(2026, 3, 7, 7, 58, tzinfo=UTC)
SAT_0800 = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)


def enqueue_saturday(conn: psycopg.Connection[Any], db_url: str, **kwargs: Any) -> int:
    s = scheduler.create_schedule(
        conn, job_type="reminder", rule="daily@08:00", zone="UTC", subject="u1",
        payload={"subject": "u1", "message": "drink water"}, now=T0, **kwargs,
    )  # fmt: skip
    conn.commit()
    replica = Scheduler(db_url, clock=FrozenClock(SAT_0758), lookahead=timedelta(minutes=5))
    replica.tick()
    replica.close()
    return s.id


def leased_job(db_url: str, now: datetime) -> jobs.Job:
    from jobs.store import PgJobStore

    with psycopg.connect(db_url, autocommit=True) as c:
        (job,) = PgJobStore(c).claim({"default": 1}, "test", timedelta(seconds=30), now)
    return job


def test_still_due_follows_the_schedule(conn: psycopg.Connection[Any], db_url: str) -> None:
    sid = enqueue_saturday(conn, db_url)
    job = leased_job(db_url, SAT_0800)
    assert still_due(conn, job, now=SAT_0800)
    # The user moves the reminder to 09:00 after it was enqueued: this job is superseded.
    scheduler.update_schedule(conn, sid, rule="daily@09:00", now=SAT_0758 + timedelta(seconds=1))
    due = still_due(conn, job, now=SAT_0800)
    assert (due.due, due.reason) == (False, "superseded")
    assert not still_due(conn, job, now=SAT_0800)  # recorded once only
    assert scheduler.get_schedule(conn, sid).skipped_count >= 1
    scheduler.delete(conn, sid, now=SAT_0800)
    assert still_due(conn, job, now=SAT_0800).reason == "deleted"


def test_still_due_checks_quiet_hours_when_the_job_runs(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    sid = enqueue_saturday(conn, db_url)
    job = leased_job(db_url, SAT_0800)
    # Quiet hours set after the job was enqueued: the run-time check catches it.
    scheduler.update_schedule(
        conn, sid, quiet_hours={"start": "07:00", "end": "09:30", "action": "defer"},
        now=SAT_0800 - timedelta(seconds=30),
    )  # fmt: skip
    due = still_due(conn, job, now=SAT_0800)
    assert (due.due, due.reason) == (False, "quiet_hours")
    assert due.defer_until == datetime(2026, 3, 7, 9, 30, tzinfo=UTC)


def test_simulated_push_delivers_once_through_retries(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    enqueue_saturday(conn, db_url, jitter=0)
    clock = FrozenClock(SAT_0800)
    provider = SimulatedPush(transient_rate=0.5, seed=3)
    handler = reminder_handler(db_url, provider, clock=clock)
    retry = jobs.RetryPolicies(default=jobs.RetryPolicy(base=timedelta(seconds=1), jitter=0))
    worker = Worker(db_url, {"reminder": handler}, clock=clock, retry=retry, listen=False)
    try:
        for _ in range(10):
            worker.run_until_idle()
            clock.advance(timedelta(minutes=30))
    finally:
        handler.close()
    rows = conn.execute("SELECT subject, message, attempt FROM simulated_pushes").fetchall()
    assert len(rows) == 1
    assert rows[0][:2] == ("u1", "drink water")
    assert conn.execute("SELECT status FROM jobs_all").fetchone() == ("succeeded",)


def test_rejected_tokens_are_dead_letters(conn: psycopg.Connection[Any], db_url: str) -> None:
    enqueue_saturday(conn, db_url)
    provider = SimulatedPush(rejected_subjects={"u1"})
    handler = reminder_handler(db_url, provider, clock=FrozenClock(SAT_0800))
    try:
        Worker(
            db_url, {"reminder": handler}, clock=FrozenClock(SAT_0800), listen=False
        ).run_until_idle()
    finally:
        handler.close()
    (record,) = jobs.list_jobs(conn)
    assert (record.status, record.last_error_code) == ("dead", "bad_token")


def test_rates_must_be_fractions() -> None:
    with pytest.raises(ValueError, match="transient_rate"):
        SimulatedPush(transient_rate=2)
