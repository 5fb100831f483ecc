"""The reminder batch handler in a real worker (``jobs.Batch``), in process and as a process."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
import scheduler
from jobs import Worker
from jobs.store import PgJobStore
from scheduler import Scheduler
from scheduler.reminders import ReminderBatchHandler, simulated_app
from scheduler.simulated import SimulatedPush
from tests.integration.scheduler.test_reminders_batch import SpyPush
from tests.processes import start_tockwork, wait_for
from timezones import FrozenClock

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
SAT_0758 = datetime(2026, 3, 7, 7, 58, tzinfo=UTC)
SAT_0800 = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)
QUIET = {"start": "07:00", "end": "09:30"}


def wrap(handler: ReminderBatchHandler) -> Any:
    return jobs.batch_handler(handler, max_batch=handler.max_batch)


@pytest.fixture
def handlers(db_url: str) -> Iterator[Any]:
    made: list[ReminderBatchHandler] = []

    def make(provider: SimulatedPush, clock: FrozenClock) -> ReminderBatchHandler:
        handler = ReminderBatchHandler(db_url, provider, clock=clock)
        made.append(handler)
        return handler

    yield make
    for handler in made:
        handler.close()


def create(conn: psycopg.Connection[Any], subject: str, **kwargs: Any) -> int:
    s = scheduler.create_schedule(
        conn, job_type="reminder", rule="daily@08:00", zone="UTC", subject=subject, jitter=0,
        payload={"subject": subject, "message": f"hello {subject}"}, now=T0, **kwargs,
    )  # fmt: skip
    return s.id


def tick(conn: psycopg.Connection[Any], db_url: str) -> None:
    conn.commit()
    replica = Scheduler(db_url, clock=FrozenClock(SAT_0758), lookahead=timedelta(minutes=5))
    replica.tick()
    replica.close()


def test_simulated_app_serves_reminders_with_the_batch_handler(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", db_url)
    app = simulated_app()
    assert isinstance(app["reminder"], jobs.BatchHandler)
    assert app["reminder"].max_batch == 500


def test_a_worker_delivers_every_reminder_once_through_failures(
    conn: psycopg.Connection[Any], db_url: str, handlers: Any
) -> None:
    for i in range(200):
        create(conn, f"u{i}")
    tick(conn, db_url)
    clock = FrozenClock(SAT_0800)
    provider = SimulatedPush(
        transient_rate=0.1, rate_limit_rate=0.1, retry_after=timedelta(seconds=5), seed=1
    )
    retry = jobs.RetryPolicies(default=jobs.RetryPolicy(base=timedelta(seconds=1), jitter=0))
    worker = Worker(
        db_url, {"reminder": wrap(handlers(provider, clock))}, clock=clock, retry=retry,
        listen=False,
    )  # fmt: skip
    for _ in range(30):
        worker.run_until_idle()
        clock.advance(timedelta(minutes=1))
    statuses = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY 1").fetchall())
    assert statuses == {"succeeded": 200}
    assert conn.execute(
        "SELECT count(*), count(DISTINCT effect_key) FROM simulated_pushes"
    ).fetchone() == (200, 200)
    attempts = conn.execute("SELECT count(*) FROM job_attempts").fetchone()
    assert attempts is not None and attempts[0] > 200  # some were retried, alone


def test_a_worker_against_paused_deleted_superseded_and_quiet_hours_schedules(
    conn: psycopg.Connection[Any], db_url: str, handlers: Any
) -> None:
    names = ("due", "paused", "gone", "moved", "defer", "skip")
    ids = {name: create(conn, name) for name in names}
    tick(conn, db_url)
    # Claimed (as a worker would have) before the user's changes, then given back: the changes
    # supersede only waiting jobs, so the jobs stay to meet the run-time check.
    with psycopg.connect(db_url, autocommit=True) as c:
        store = PgJobStore(c)
        claimed = store.claim({"default": 10}, "t", timedelta(seconds=30), SAT_0800)
    assert len(claimed) == 6
    at = SAT_0800 - timedelta(seconds=30)
    scheduler.pause(conn, ids["paused"], now=at)
    scheduler.delete(conn, ids["gone"], now=at)
    scheduler.update_schedule(conn, ids["moved"], rule="daily@09:00", now=at)
    scheduler.update_schedule(conn, ids["defer"], quiet_hours={**QUIET, "action": "defer"}, now=at)
    scheduler.update_schedule(conn, ids["skip"], quiet_hours={**QUIET, "action": "skip"}, now=at)
    conn.commit()
    with psycopg.connect(db_url, autocommit=True) as c:
        released = PgJobStore(c).release([(j.id, j.lease_token) for j in claimed], "t", SAT_0800)
    assert len(released) == 6
    clock = FrozenClock(SAT_0800 + timedelta(seconds=5))
    provider = SimulatedPush()
    Worker(
        db_url, {"reminder": wrap(handlers(provider, clock))}, clock=clock, listen=False
    ).run_until_idle()
    rows = conn.execute(
        "SELECT payload->>'subject', status, run_at FROM jobs ORDER BY 1"
    ).fetchall()
    by_subject = {subject: (status, run_at) for subject, status, run_at in rows}
    assert {s: st for s, (st, _) in by_subject.items()} == {
        "defer": "pending", "due": "succeeded", "gone": "succeeded", "moved": "succeeded",
        "paused": "succeeded", "skip": "succeeded",
    }  # fmt: skip
    assert by_subject["defer"][1] == datetime(2026, 3, 7, 9, 30, tzinfo=UTC)
    assert conn.execute("SELECT subject FROM simulated_pushes").fetchall() == [("due",)]
    reasons = conn.execute(
        "SELECT schedule_id, reason FROM schedule_skips WHERE recorded_at = %s ORDER BY 1",
        (clock.now(),),
    ).fetchall()
    assert reasons == sorted(
        [(ids["paused"], "paused"), (ids["moved"], "superseded"), (ids["skip"], "quiet_hours")]
    )


# -- SIGKILL mid-batch: the app the worker process runs ---------------------------------------


def hang_after_send_app() -> dict[str, Any]:
    """The batch handler; the first attempt of a batch hangs after its pushes (killed there)."""
    url = os.environ["DATABASE_URL"]
    inner = ReminderBatchHandler(url, SimulatedPush())

    def handle(batch: Any) -> None:
        inner(batch)
        if any(j.attempt == 1 for j in batch.jobs):
            time.sleep(120)

    return {"reminder": jobs.batch_handler(handle, max_batch=500)}


def test_sigkill_after_the_pushes_before_completion_delivers_no_reminder_twice(
    db_url: str, handlers: Any
) -> None:
    with psycopg.connect(db_url, autocommit=True) as auto:
        jobs.enqueue_many(
            auto, [jobs.JobSpec("reminder", {"subject": f"u{i}"}) for i in range(300)]
        )
        proc = start_tockwork(
            db_url, "worker", "--app",
            "tests.integration.scheduler.test_reminders_worker:hang_after_send_app",
            "--poll", "0.05", "--lease", "30", "--no-listen",
        )  # fmt: skip
        try:
            wait_for(auto, "SELECT count(*) FROM simulated_pushes", timeout=60)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        # The killed batches pushed, recorded their pushes, and committed no outcome.
        before = {r[0] for r in auto.execute("SELECT job_id FROM simulated_pushes").fetchall()}
        leased = {r[0] for r in auto.execute("SELECT id FROM jobs WHERE status = 'leased'")}
        assert before and before <= leased
        row = auto.execute("SELECT max(locked_until) FROM jobs").fetchone()
        assert row is not None
        later = row[0] + timedelta(seconds=1)
        assert len(PgJobStore(auto).reap(1000, later)) == len(leased)
        clock = FrozenClock(later)
        provider = SpyPush()
        Worker(
            db_url, {"reminder": wrap(handlers(provider, clock))}, clock=clock, listen=False
        ).run_until_idle()
        assert auto.execute("SELECT status, count(*) FROM jobs GROUP BY 1").fetchall() == [
            ("succeeded", 300)
        ]
        # The provider was never asked again for a reminder pushed before the kill.
        asked = [job_id for request in provider.requests for job_id in request]
        assert len(asked) == len(set(asked)) == 300 - len(before)
        assert not set(asked) & before
        assert auto.execute(
            "SELECT count(*), count(DISTINCT job_id) FROM simulated_pushes"
        ).fetchone() == (300, 300)
