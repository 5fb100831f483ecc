"""The lateness page is bounded whatever its window: the newest LATENESS_SCAN attempts are read
(newest first), the latest LATENESS_SAMPLE first attempts among them counted, and it says so."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from starlette.testclient import TestClient

from scheduler.dashboard import create_app, views
from tests.integration.dashboard.conftest import TOKEN
from timezones import FrozenClock

NOW = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)


def seed(db_url: str) -> None:
    """30 first attempts, a minute apart (the i-th newest started i seconds after its run_at),
    then 3 second attempts, the newest of all."""
    with psycopg.connect(db_url) as conn, conn.cursor() as cur:
        for i in range(30, 0, -1):
            finished = NOW - timedelta(minutes=i)
            (job_id,) = cur.execute(
                "INSERT INTO jobs (job_type, queue, status, run_at, completed_at)"
                " VALUES ('t', 'q', 'succeeded', %s, %s) RETURNING id",
                (finished - timedelta(seconds=i + 1), finished),
            ).fetchone() or (0,)
            cur.execute(
                "INSERT INTO job_attempts (job_id, attempt, queue, job_type, started_at,"
                " finished_at, outcome) VALUES (%s, 1, 'q', 't', %s, %s, 'succeeded')",
                (job_id, finished - timedelta(seconds=1), finished),
            )
        for i in range(3):
            cur.execute(
                "INSERT INTO job_attempts (job_id, attempt, queue, job_type, started_at,"
                " finished_at, outcome) VALUES (1, 2, 'q', 't', %s, %s, 'succeeded')",
                (NOW - timedelta(seconds=30 - i), NOW - timedelta(seconds=29 - i)),
            )


def test_the_latest_first_attempts_are_counted_up_to_the_sample(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed(db_url)
    with psycopg.connect(db_url) as conn:
        whole = views.lateness(conn, timedelta(hours=1), None, NOW)
        assert whole["counted"] == 30 and sum(whole["queues"]["q"]["start"]) == 30
        assert whole["since"] == NOW - timedelta(minutes=30)
        # Lateness i s for the i-th newest: 1 to 4 s in "1s-5s" (bucket 3), 5 to 29 s in
        # "5s-30s", 30 s in "30s-1m".
        assert whole["queues"]["q"]["start"][3:6] == [4, 25, 1]
        monkeypatch.setattr(views, "LATENESS_SAMPLE", 10)
        sample = views.lateness(conn, timedelta(days=7), None, NOW)
        assert sample["counted"] == 10 and sample["since"] == NOW - timedelta(minutes=10)
        assert sample["queues"]["q"]["start"][3:5] == [4, 6]  # the 10 latest: 1 s to 10 s
        monkeypatch.setattr(views, "LATENESS_SCAN", 5)  # 3 second attempts, 2 first ones
        scanned = views.lateness(conn, timedelta(days=7), None, NOW)
        assert scanned["counted"] == 2 and scanned["since"] == NOW - timedelta(minutes=2)
    with TestClient(create_app(db_url, token=TOKEN, clock=FrozenClock(NOW))) as client:
        page = client.get("/lateness?window=7d", headers={"Authorization": f"Bearer {TOKEN}"})
    assert page.status_code == 200
    assert "at most 10 among the newest 5 attempts" in page.text
    assert re.search(
        r'<span id="lateness-counted">2 counted, finished since <time datetime="2026-11-01T04:58:00'
        r'\+00:00" title="2026-11-01 04:58:00 UTC">2026-11-01 04:58:00Z</time>',
        page.text,
    )
