"""Late reminders expire (issue 24): a worker outage longer than the schedules' max_lateness.

Every late reminder ends 'expired' unrun, none is delivered, every one is counted (the jobs
metric, a skip of kind 'expired' per occurrence, the schedules' skipped_count), and the push
messages of the on-time ones carry the job's expiry as the provider-side TTL.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

import jobs
import scheduler
from jobs import Worker
from jobs.metrics import Metrics
from scheduler import InvalidSchedule, Scheduler
from scheduler.definitions import parse_definitions, sync
from scheduler.delivery import DeliveryHandler, SubjectAsToken
from scheduler.push import PushMessage, PushResult
from scheduler.reminders import ReminderHandler
from scheduler.simulated import SimulatedChannel, SimulatedPush
from scheduler.spec import DEFAULT_REMINDER_LATENESS
from timezones import FrozenClock

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
SAT_0758 = datetime(2026, 3, 7, 7, 58, tzinfo=UTC)
SAT_0800 = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)


class KeepingChannel(SimulatedChannel):
    """The simulated channel, keeping every message sent."""

    def __init__(self, conninfo: str) -> None:
        super().__init__(conninfo)
        self.sent: list[PushMessage] = []

    async def send(self, messages: Sequence[PushMessage], *, now: datetime) -> list[PushResult]:
        self.sent.extend(messages)
        return await super().send(messages, now=now)


def reminders(conn: psycopg.Connection[Any], n: int, rule: str, **kwargs: Any) -> list[int]:
    ids = [
        scheduler.create_schedule(
            conn, job_type="reminder", rule=rule, zone="UTC", subject=f"u{i}", jitter=0,
            payload={"subject": f"u{i}", "message": "take your pill"}, now=T0, **kwargs,
        ).id
        for i in range(n)
    ]  # fmt: skip
    conn.commit()
    return ids


def tick(db_url: str) -> None:
    replica = Scheduler(db_url, clock=FrozenClock(SAT_0758), lookahead=timedelta(minutes=5))
    replica.tick()
    replica.close()


def test_the_lateness_defaults_to_an_hour_for_reminders_and_none_for_definitions(
    conn: psycopg.Connection[Any],
) -> None:
    (reminder,) = reminders(conn, 1, "daily@08:00")
    named = scheduler.create_schedule(
        conn, job_type="cleanup", rule="daily@03:00", zone="UTC", key="nightly", now=T0
    )
    own = scheduler.create_schedule(
        conn, job_type="cleanup", rule="daily@03:00", zone="UTC", key="n2", now=T0,
        max_lateness=timedelta(minutes=5),
    )  # fmt: skip
    assert scheduler.get_schedule(conn, reminder).max_lateness_seconds == 3600
    assert timedelta(hours=1) == DEFAULT_REMINDER_LATENESS
    assert named.max_lateness_seconds is None
    assert own.max_lateness_seconds == 300
    changed = scheduler.update_schedule(conn, reminder, max_lateness=90, now=T0)
    assert changed.max_lateness_seconds == 90


@pytest.mark.parametrize("value", [-1, 0, timedelta(seconds=-1), "1h", float("inf")])
def test_a_bad_lateness_is_refused_naming_it(conn: psycopg.Connection[Any], value: Any) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        reminders(conn, 1, "daily@08:00", max_lateness=value)
    assert raised.value.field == "max_lateness"


def test_a_worker_outage_longer_than_the_lateness_expires_every_late_reminder(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    late = reminders(conn, 30, "daily@08:00", max_lateness=timedelta(minutes=30))
    on_time = reminders(conn, 1, "daily@08:40", max_lateness=timedelta(minutes=30))
    tick(db_url)
    # The 08:40 one is enqueued by a tick at 08:38; the workers come back at 08:45.
    replica = Scheduler(db_url, clock=FrozenClock(SAT_0800 + timedelta(minutes=38)),
                        lookahead=timedelta(minutes=5))  # fmt: skip
    replica.tick()
    replica.close()
    expires = conn.execute(
        "SELECT DISTINCT expires_at - run_at FROM jobs_all WHERE job_type = 'reminder'"
    ).fetchall()
    assert expires == [(timedelta(minutes=30),)]
    at = SAT_0800 + timedelta(minutes=45)
    clock = FrozenClock(at)
    channel = KeepingChannel(db_url)
    handler = DeliveryHandler(db_url, [channel], resolver=SubjectAsToken("simulated"), clock=clock)
    metrics = Metrics(CollectorRegistry())
    try:
        Worker(
            db_url, {"reminder": handler}, clock=clock, listen=False, metrics=metrics
        ).run_until_idle()
    finally:
        asyncio.run(handler.aclose())
    statuses = dict(conn.execute("SELECT status, count(*) FROM jobs_all GROUP BY 1").fetchall())
    assert statuses == {"expired": 30, "succeeded": 1}
    # None delivered but the one on time, whose message expires with its job.
    assert [m.subject for m in channel.sent] == ["u0"]
    assert channel.sent[0].expires_at == SAT_0800 + timedelta(minutes=40 + 30)
    assert conn.execute("SELECT count(*) FROM simulated_pushes").fetchone() == (1,)
    # All counted: the metric, one skip of kind 'expired' per occurrence, the schedules' count.
    value = metrics.registry.get_sample_value(
        "tockwork_jobs_expired_total", {"queue": "default", "job_type": "reminder"}
    )
    assert value == 30.0
    skips = conn.execute(
        "SELECT schedule_id, kind, occurrence_at FROM schedule_skips ORDER BY 1"
    ).fetchall()
    assert skips == [(sid, "expired", SAT_0800) for sid in late]
    counts = conn.execute("SELECT id, skipped_count FROM schedules ORDER BY id").fetchall()
    assert counts == [(sid, 1) for sid in late] + [(on_time[0], 0)]
    # Requeued by an operator, an expired reminder runs (its skip stays recorded, once).
    requeued = jobs.requeue(conn, job_type="reminder", statuses=["expired"], now=at)
    assert len(requeued) == 30


def test_the_single_job_reminder_handler_records_expired_reminders_too(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    ids = reminders(conn, 3, "daily@08:00", max_lateness=60)
    tick(db_url)
    clock = FrozenClock(SAT_0800 + timedelta(minutes=2))
    handler = ReminderHandler(db_url, SimulatedPush(), clock=clock)
    try:
        Worker(db_url, {"reminder": handler}, clock=clock, listen=False).run_until_idle()
    finally:
        handler.close()
    kinds = conn.execute("SELECT schedule_id, kind FROM schedule_skips ORDER BY 1").fetchall()
    assert kinds == [(sid, "expired") for sid in ids]
    assert conn.execute("SELECT count(*) FROM jobs_all WHERE status = 'expired'").fetchone() == (3,)


def test_a_definition_sets_its_lateness_and_a_negative_one_is_refused(
    conn: psycopg.Connection[Any],
) -> None:
    defs = parse_definitions(
        [{"key": "report", "rule": "daily@06:00", "zone": "UTC", "job_type": "report",
          "max_lateness": 600}]
    )  # fmt: skip
    sync(conn, defs, now=T0)
    assert scheduler.get_schedule(conn, key="report").max_lateness_seconds == 600
    with pytest.raises(InvalidSchedule) as raised:
        parse_definitions(
            [{"key": "r2", "rule": "daily@06:00", "zone": "UTC", "job_type": "t",
              "max_lateness": -5}]
        )  # fmt: skip
    assert raised.value.field.endswith("max_lateness")
