"""The scheduler as a service: one instant per tick, run_until_idle, a lost connection."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import scheduler
from jobs.retry import RetryPolicy
from jobs.service import Reconnect
from scheduler import Scheduler
from tests.processes import wait_for
from timezones import FrozenClock

FRI_1200 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
SAT_0758 = datetime(2026, 3, 7, 7, 58, tzinfo=UTC)  # two minutes before a daily@08:00 (UTC)
FAST = Reconnect(
    backoff=RetryPolicy(base=timedelta(seconds=0.01), cap=timedelta(seconds=0.05), jitter=0.0)
)


class TickingClock(FrozenClock):
    """A clock that moves one second at every read: a tick that reads it twice mixes instants."""

    def __init__(self, start: datetime) -> None:
        super().__init__(start)
        self.reads = 0

    def now(self) -> datetime:
        self.reads += 1
        return self.advance(seconds=1) - timedelta(seconds=1)


def terminate_replica(auto: psycopg.Connection[Any]) -> None:
    """End the server side of the replica's connection, as a database restart would."""
    wait_for(
        auto,
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tockwork-test-sched'",
    )
    auto.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE application_name = 'tockwork-test-sched'"
    )


def daily_at_eight(conn: psycopg.Connection[Any]) -> int:
    s = scheduler.create_schedule(
        conn, job_type="remind", rule="daily@08:00", zone="UTC", now=FRI_1200
    )
    conn.commit()
    return s.id


def test_a_tick_plans_enqueues_and_advances_at_one_instant(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    schedule_id = daily_at_eight(conn)
    clock = TickingClock(SAT_0758)
    replica = Scheduler(db_url, clock=clock, lookahead=timedelta(minutes=5))
    try:
        assert replica.tick().enqueued == 1
    finally:
        replica.close()
    assert clock.reads == 1
    assert conn.execute("SELECT created_at FROM jobs_all").fetchall() == [(SAT_0758,)]
    assert conn.execute(
        "SELECT updated_at FROM schedules WHERE id = %s", (schedule_id,)
    ).fetchall() == [(SAT_0758,)]


def test_an_explicit_tick_instant_is_the_one_the_jobs_get(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    daily_at_eight(conn)
    replica = Scheduler(db_url, lookahead=timedelta(minutes=5))  # no clock: the database's
    try:
        assert replica.tick(SAT_0758).enqueued == 1
    finally:
        replica.close()
    assert conn.execute("SELECT created_at FROM jobs_all").fetchall() == [(SAT_0758,)]


def test_run_until_idle_ticks_until_nothing_is_due(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    for n in range(5):
        scheduler.create_schedule(
            conn, job_type="remind", rule="daily@08:00", zone="UTC", subject=f"u{n}", now=FRI_1200
        )
    conn.commit()
    replica = Scheduler(
        db_url, clock=FrozenClock(SAT_0758), lookahead=timedelta(minutes=5), batch_size=2
    )
    totals = replica.run_until_idle()
    assert totals.enqueued == 5
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (5,)
    assert replica.run_until_idle().enqueued == 5  # the totals of the replica; nothing new
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (5,)


def test_the_stop_line_is_for_humans(
    conn: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26: ``tockwork scheduler`` ended its log with ``stopped: TickResult(enqueued=...)``,
    a Python repr; now a line of words."""
    caplog.set_level(logging.INFO, logger="tockwork")
    scheduler.create_schedule(
        conn, job_type="remind", rule="daily@08:00", zone="UTC", subject="u", now=FRI_1200
    )
    conn.commit()
    replica = Scheduler(db_url, clock=FrozenClock(SAT_0758), lookahead=timedelta(minutes=5))
    replica.run_until_idle()
    (line,) = [r.getMessage() for r in caplog.records if " stopped" in r.getMessage()]
    assert line.endswith(f"scheduler {replica.name} stopped: enqueued 1, duplicates 0, missed 0, "
                         "skipped 0, overlapped 0, locked elsewhere 0, schedules 1, "
                         "batches 1"), line  # fmt: skip
    assert "TickResult" not in caplog.text and "=" not in line


def test_a_running_scheduler_rides_out_a_lost_connection(
    conn: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tockwork")
    daily_at_eight(conn)
    clock = FrozenClock(FRI_1200)  # nothing due yet
    replica = Scheduler(
        db_url,
        clock=clock,
        lookahead=timedelta(minutes=5),
        interval=timedelta(seconds=0.02),
        connect_kwargs={"application_name": "tockwork-test-sched"},
        name="s1",
        reconnect=FAST,
    )
    replica.start()
    # Autocommit: pg_stat_activity is read once per transaction.
    with psycopg.connect(db_url, autocommit=True) as auto:
        try:
            assert replica.wait_started(10)
            terminate_replica(auto)
            clock.set(SAT_0758)
            wait_for(auto, "SELECT count(*) FROM jobs_all")
        finally:
            replica.stop()
            assert replica.wait(10)
    assert replica.totals.enqueued == 1
    lost = [r for r in caplog.records if "database connection lost" in r.getMessage()]
    restored = [r for r in caplog.records if "connection restored" in r.getMessage()]
    assert [r.getMessage().split(":")[0] for r in lost] == ["scheduler s1"]
    assert len(restored) == 1
