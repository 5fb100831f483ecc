"""The reminder batch handler (``scheduler.delivery.DeliveryHandler``, async) in a real worker
(``jobs.Batch`` on the worker's event loop), in process and as a process.

A worker's ``run_until_idle`` runs its async handlers on an event loop of its own each time: a
handler's connections outlive a loop and serve the next one.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
import scheduler
from jobs import Worker
from jobs.store import PgJobStore
from scheduler import Scheduler
from scheduler.delivery import DeliveryHandler, SubjectAsToken, simulated_app
from scheduler.simulated import SimulatedChannel
from tests.integration.scheduler.test_reminders_batch import SpyChannel
from tests.processes import start_tockwork, wait_for
from timezones import FrozenClock

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
SAT_0758 = datetime(2026, 3, 7, 7, 58, tzinfo=UTC)
SAT_0800 = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)
QUIET = {"start": "07:00", "end": "09:30"}


@pytest.fixture
def handlers(db_url: str) -> Iterator[Callable[[SimulatedChannel, FrozenClock], DeliveryHandler]]:
    """Delivery handlers (each subject its own simulated device), closed after the test."""
    made: list[DeliveryHandler] = []

    def make(channel: SimulatedChannel, clock: FrozenClock) -> DeliveryHandler:
        handler = DeliveryHandler(
            db_url, [channel], resolver=SubjectAsToken("simulated"), clock=clock
        )
        made.append(handler)
        return handler

    yield make
    for handler in made:
        asyncio.run(handler.aclose())


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


def test_simulated_app_serves_reminders_with_the_delivery_handler(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", db_url)
    # A real provider's settings in the environment do not leak into the simulated app.
    monkeypatch.setenv("TOCKWORK_FCM_CREDENTIALS", "/nonexistent/credentials.json")
    monkeypatch.setenv("TOCKWORK_APNS_KEY_ID", "ABCDEFGHIJ")
    app = simulated_app()
    handler = app["reminder"]
    try:
        assert isinstance(handler, DeliveryHandler)
        assert handler.max_batch == 500
        assert jobs.batch.is_async_handler(handler)
        assert list(handler.channels) == ["simulated"]
        assert isinstance(handler.channels["simulated"], SimulatedChannel)
        assert handler.resolver == SubjectAsToken("simulated")
    finally:
        asyncio.run(handler.aclose())


def test_a_worker_delivers_every_reminder_once_through_failures(
    conn: psycopg.Connection[Any], db_url: str, handlers: Any
) -> None:
    for i in range(200):
        create(conn, f"u{i}")
    tick(conn, db_url)
    clock = FrozenClock(SAT_0800)
    channel = SimulatedChannel(
        db_url, transient_rate=0.1, rate_limit_rate=0.1, retry_after=timedelta(seconds=5), seed=1
    )
    retry = jobs.RetryPolicies(default=jobs.RetryPolicy(base=timedelta(seconds=1), jitter=0))
    worker = Worker(
        db_url, {"reminder": handlers(channel, clock)}, clock=clock, retry=retry, listen=False,
    )  # fmt: skip
    for _ in range(30):
        worker.run_until_idle()
        clock.advance(timedelta(minutes=1))
    statuses = dict(conn.execute("SELECT status, count(*) FROM jobs_all GROUP BY 1").fetchall())
    assert statuses == {"succeeded": 200}
    assert conn.execute(
        "SELECT count(*), count(DISTINCT (schedule_id, occurrence_key, token)),"
        " count(DISTINCT token) FROM simulated_pushes"
    ).fetchone() == (200, 200, 200)
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
    channel = SimulatedChannel(db_url)
    Worker(
        db_url, {"reminder": handlers(channel, clock)}, clock=clock, listen=False
    ).run_until_idle()
    rows = conn.execute(
        "SELECT payload->>'subject', status, run_at FROM jobs_all ORDER BY 1"
    ).fetchall()
    by_subject = {subject: (status, run_at) for subject, status, run_at in rows}
    assert {s: st for s, (st, _) in by_subject.items()} == {
        "defer": "pending", "due": "succeeded", "gone": "succeeded", "moved": "succeeded",
        "paused": "succeeded", "skip": "succeeded",
    }  # fmt: skip
    assert by_subject["defer"][1] == datetime(2026, 3, 7, 9, 30, tzinfo=UTC)
    assert conn.execute("SELECT subject, token FROM simulated_pushes").fetchall() == [
        ("due", "due")
    ]
    reasons = conn.execute(
        "SELECT schedule_id, reason FROM schedule_skips WHERE recorded_at = %s ORDER BY 1",
        (clock.now(),),
    ).fetchall()
    assert reasons == sorted(
        [(ids["paused"], "paused"), (ids["moved"], "superseded"), (ids["skip"], "quiet_hours")]
    )


# -- SIGKILL mid-batch: the app the worker process runs ---------------------------------------


def hang_after_send_app() -> dict[str, Any]:
    """The delivery handler; the first attempt of a batch hangs after its pushes (killed
    there: after the record-after-send, before the completion)."""
    url = os.environ["DATABASE_URL"]
    inner = DeliveryHandler(url, [SimulatedChannel(url)], resolver=SubjectAsToken("simulated"))

    async def handle(batch: Any) -> None:
        await inner(batch)
        if any(j.attempt == 1 for j in batch.jobs):
            await asyncio.sleep(120)

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
            "--poll", "0.05", "--lease", "30", "--no-listen", "--queue", "default=1",
        )  # fmt: skip
        try:
            # One batch at a time (default=1): it hangs once its pushes are recorded (the
            # channel's rows commit before the handler records their effects).
            wait_for(
                auto,
                "SELECT count(*) > 0 AND count(*) = (SELECT count(*) FROM job_effects)"
                " FROM simulated_pushes",
                timeout=60,
            )
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        # The killed batches pushed, recorded their pushes, and committed no outcome. (A job
        # here has no schedule: its one device's token, its subject, names it.)
        before = {r[0] for r in auto.execute("SELECT token FROM simulated_pushes").fetchall()}
        leased = {
            r[0]
            for r in auto.execute("SELECT payload->>'subject' FROM jobs WHERE status = 'leased'")
        }
        assert before and before <= leased
        recorded = auto.execute("SELECT count(*) FROM job_effects").fetchone()
        assert recorded == (len(before),)
        row = auto.execute("SELECT max(locked_until) FROM jobs_all").fetchone()
        assert row is not None
        later = row[0] + timedelta(seconds=1)
        assert len(PgJobStore(auto).reap(1000, later)) == len(leased)
        clock = FrozenClock(later)
        channel = SpyChannel(db_url)
        Worker(
            db_url, {"reminder": handlers(channel, clock)}, clock=clock, listen=False
        ).run_until_idle()
        assert auto.execute("SELECT status, count(*) FROM jobs_all GROUP BY 1").fetchall() == [
            ("succeeded", 300)
        ]
        # The channel was never asked again for a reminder pushed before the kill.
        asked = [token for request in channel.requests for token in request]
        assert len(asked) == len(set(asked)) == 300 - len(before)
        assert not set(asked) & before
        assert auto.execute(
            "SELECT count(*), count(DISTINCT token) FROM simulated_pushes"
        ).fetchone() == (300, 300)


def test_the_simulated_app_as_a_worker_process_delivers_each_reminder_once(db_url: str) -> None:
    n = 300  # as in the statement the test waits on
    with psycopg.connect(db_url, autocommit=True) as auto:
        jobs.enqueue_many(
            auto,
            [jobs.JobSpec("reminder", {"subject": f"u{i}", "title": "Hi {subject}"})
             for i in range(n)],
        )  # fmt: skip
        proc = start_tockwork(
            db_url, "worker", "--app", "scheduler.delivery:simulated_app",
            "--poll", "0.05", "--no-listen",
        )  # fmt: skip
        try:
            wait_for(
                auto,
                "SELECT count(*) = 300 FROM jobs_all WHERE status = 'succeeded'",
                timeout=60,
            )
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
            _, err = proc.communicate()
        assert proc.returncode == 0, err.decode()[-2000:]
        assert b"Traceback" not in err
        rows = auto.execute(
            "SELECT count(*), count(DISTINCT token), count(DISTINCT effect_key),"
            " count(*) FILTER (WHERE title = 'Hi ' || subject AND token = subject)"
            " FROM simulated_pushes"
        ).fetchone()
        assert rows == (n, n, n, n)
