"""The overview's chart of the last hour: closed minutes from the rollup of attempts, the minutes
it lacks counted from the attempts (bounded), and the page saying which."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from jobs.maintenance import rollup_attempts
from scheduler.dashboard import create_app, views
from tests.integration.dashboard.conftest import TOKEN
from timezones import FrozenClock

NOW = datetime(2026, 11, 1, 5, 0, 30, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
FAILED = ("retry", "dead", "lease_expired", "interrupted", "fenced", "rate_limited")


def seed(db_url: str) -> list[tuple[datetime, str]]:
    """Attempts over the last 90 minutes (and one in the future, which no chart counts)."""
    rng = random.Random(3)
    outcomes = ("succeeded", "succeeded", "snoozed", "cancelled", *FAILED)
    finished = [
        (NOW - timedelta(seconds=rng.uniform(0, 90 * 60)), rng.choice(outcomes))
        for _ in range(2000)
    ]
    finished.append((NOW + timedelta(seconds=5), "succeeded"))
    with psycopg.connect(db_url) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO job_attempts (job_id, attempt, queue, job_type, finished_at, outcome)"
            " VALUES (1, 1, 'default', 't', %s, %s)",
            finished,
        )
    return finished


def expected(finished: list[tuple[datetime, str]]) -> dict[datetime, tuple[int, int]]:
    """Per chart minute (the 60 up to NOW's), counted in Python: (succeeded, failed)."""
    top = NOW.replace(second=0)
    result = {}
    for i in range(60):
        minute = top - (59 - i) * MINUTE
        counts = Counter(o for at, o in finished if minute <= at < minute + MINUTE and at <= NOW)
        result[minute] = (counts["succeeded"], sum(counts[o] for o in FAILED))
    return result


def chart(db_url: str) -> dict[str, Any]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return views.attempt_minutes(conn, NOW)


def page(db_url: str) -> str:
    with TestClient(create_app(db_url, token=TOKEN, clock=FrozenClock(NOW))) as client:
        response = client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return response.text


def test_without_the_rollup_every_minute_is_counted_from_the_attempts(db_url: str) -> None:
    finished = seed(db_url)
    want = expected(finished)
    got = chart(db_url)
    assert {m["minute"]: (m["succeeded"], m["failed"]) for m in got["minutes"]} == want
    assert {m["source"] for m in got["minutes"]} == {"live"}
    assert (got["lacking"], got["not_counted"]) == (60 - views.CHART_OPEN_MINUTES, 0)
    text = page(db_url)
    ok, bad = sum(s for s, _ in want.values()), sum(f for _, f in want.values())
    assert f"Last hour: {ok} completed, {bad} failed" in text
    assert 'id="chart-rollup"' in text and "tockwork.attempt_rollup" in text
    assert 'id="chart-uncounted"' not in text


def test_closed_minutes_come_from_the_rollup(db_url: str) -> None:
    finished = seed(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        rollup_attempts(conn, now=NOW)
    got = chart(db_url)
    want = expected(finished)
    assert {m["minute"]: (m["succeeded"], m["failed"]) for m in got["minutes"]} == want
    # At 05:00:30 the rollup holds every minute up to 04:58 (closed a minute after its end).
    assert [m["source"] for m in got["minutes"]] == ["rollup"] * 58 + ["live"] * 2
    assert (got["lacking"], got["not_counted"]) == (0, 0)
    # The page reads the rollup's row, not the attempts, for a rolled-up minute.
    tampered = NOW.replace(second=0) - 30 * MINUTE
    with psycopg.connect(db_url) as conn:
        conn.execute(
            'UPDATE job_attempt_minutes SET outcomes = \'{"succeeded": 1000, "dead": 7}\''
            " WHERE minute = %s",
            (tampered,),
        )
    text = page(db_url)
    ok = sum(s for s, _ in want.values()) - want[tampered][0] + 1000
    bad = sum(f for _, f in want.values()) - want[tampered][1] + 7
    assert f"Last hour: {ok} completed, {bad} failed" in text
    assert 'id="chart-rollup"' not in text


def test_a_gap_in_the_rollup_is_counted_live_and_said(db_url: str) -> None:
    finished = seed(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        rollup_attempts(conn, now=NOW)
        gap = [NOW.replace(second=0) - i * MINUTE for i in (20, 21, 22, 40)]
        conn.execute("DELETE FROM job_attempt_minutes WHERE minute = ANY(%s)", (gap,))
    got = chart(db_url)
    by_minute = {m["minute"]: m for m in got["minutes"]}
    assert {m for m, v in by_minute.items() if v["source"] == "live"} == {
        *gap,
        NOW.replace(second=0) - MINUTE,
        NOW.replace(second=0),
    }
    assert {m: (v["succeeded"], v["failed"]) for m, v in by_minute.items()} == expected(finished)
    assert got["lacking"] == 4
    assert "lacks 4 of this hour" in page(db_url)


def test_minutes_not_counted_in_time_are_left_out_and_said(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished = seed(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        rollup_attempts(conn, now=NOW)
        top = NOW.replace(second=0)
        conn.execute("DELETE FROM job_attempt_minutes WHERE minute >= %s", (top - 10 * MINUTE,))
    monkeypatch.setattr(views, "CHART_LIVE_BUDGET", 0.0)
    got = chart(db_url)
    sources = [m["source"] for m in got["minutes"]]
    assert sources == ["rollup"] * 49 + ["not counted"] * 11
    assert all(m["succeeded"] == m["failed"] == 0 for m in got["minutes"][49:])
    want = expected(finished)
    assert got["not_counted"] == 11 and got["lacking"] == 7
    text = page(db_url)
    rolled_ok = sum(s for m, (s, _) in want.items() if m < NOW.replace(second=0) - 10 * MINUTE)
    assert f"Last hour: {rolled_ok} completed" in text
    assert "11 minutes could not be counted in time" in text
    assert text.count('class="uncounted"') == 11
