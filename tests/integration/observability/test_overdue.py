"""The overdue detector (issue 24): schedules whose next occurrence is past with no job for it.

It fires while every scheduler replica is stopped and clears once one starts (a real
``tockwork scheduler`` process): the gauge ``tockwork_schedules_overdue`` of the scrape-time
collector, :func:`scheduler.health.overdue_schedules` and ``tockwork schedules overdue``.
"""

from __future__ import annotations

import json
import signal
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

import scheduler
from scheduler import InvalidSchedule, health
from scheduler.cli import main
from tests.processes import start_tockwork, wait_for

OVERDUE_SQL = (
    "SELECT count(*) {op} 0 FROM schedules"
    " WHERE NOT paused AND next_run_at < now() - interval '1 minute'"
)


def gauge(db_url: str) -> float | None:
    registry = CollectorRegistry()
    health.register_metrics(db_url, registry)
    return registry.get_sample_value("tockwork_schedules_overdue")


def cli(db_url: str, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``tockwork schedules overdue ARGS`` in process: its exit code and output."""
    code = main(["schedules", "overdue", *args, "--database-url", db_url])
    return code, capsys.readouterr().out


def test_the_detector_fires_with_every_replica_stopped_and_clears_when_one_starts(
    conn: psycopg.Connection[Any], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    real_now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    ago = real_now - timedelta(minutes=10)
    # Created ten minutes ago and never ticked since: no replica ran.
    late = [
        scheduler.create_schedule(
            conn, job_type="reminder", rule="every:1m", zone="UTC", subject=f"u{i}", now=ago
        ).id
        for i in range(5)
    ]
    paused = scheduler.create_schedule(
        conn, job_type="reminder", rule="every:1m", zone="UTC", subject="p", now=ago
    )
    scheduler.pause(conn, paused.id, now=ago)
    scheduler.create_schedule(  # not due yet: never overdue
        conn, job_type="reminder", rule="daily@08:00", zone="UTC", subject="later",
        now=real_now,
    )  # fmt: skip
    conn.commit()
    assert gauge(db_url) == 5.0
    found = health.overdue_schedules(conn)
    assert [o.id for o in found] == late  # most overdue first, then by id
    assert all(o.overdue_seconds > 60 for o in found)
    assert health.overdue_schedules(conn, after=timedelta(hours=1)) == []
    code, listed = cli(db_url, capsys, "--json")
    assert code == 0
    assert [o["id"] for o in json.loads(listed)] == late
    code, text = cli(db_url, capsys, "--limit", "2", "--after", "30")
    assert code == 0 and "(2 schedule(s) overdue by more than 30 s" in text

    replica = start_tockwork(db_url, "scheduler", "--interval", "0.2")
    try:
        wait_for(conn, OVERDUE_SQL.format(op="="), timeout=60)
        conn.commit()
        assert gauge(db_url) == 0.0
        assert health.overdue_schedules(conn) == []
    finally:
        replica.send_signal(signal.SIGTERM)
        _out, err = replica.communicate(timeout=30)
    assert replica.returncode == 0, err.decode()


@pytest.mark.parametrize("value", [timedelta(seconds=-1), 5])
def test_a_bad_threshold_is_refused(conn: psycopg.Connection[Any], value: Any) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        health.overdue_schedules(conn, after=value)
    assert raised.value.field == "after"


def test_no_schedules_table_means_no_gauge(empty_db_url: str) -> None:
    assert gauge(empty_db_url) is None  # the family is absent, not zero
