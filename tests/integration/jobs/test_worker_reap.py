"""Reaped and released jobs go back to the front of their queue (issue 13 §4): a job whose
worker died ran 42 s after it was reaped, behind the whole backlog enqueued since."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

import jobs
from jobs.store import PgJobStore

T0 = datetime(2026, 6, 30, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def backlog(conn: psycopg.Connection[Any]) -> tuple[int, list[int]]:
    """One job claimed at T0, then a backlog of five enqueued one second later."""
    orphan = jobs.enqueue(conn, "t", {"orphan": True}, now=T0).id
    conn.commit()
    with psycopg.connect(conn.info.dsn, autocommit=True) as c:
        store = PgJobStore(c)
        (job,) = store.claim({"default": 1}, "crashed", LEASE, T0)
        store.heartbeat([(job.id, job.lease_token)], LEASE, T0, started=[job.id])  # it started
    assert job.id == orphan
    later = [jobs.enqueue(conn, "t", {"i": i}, now=T0 + timedelta(seconds=1)).id for i in range(5)]
    conn.commit()
    return orphan, later


def test_a_reaped_job_is_claimed_before_the_backlog(conn: psycopg.Connection[Any]) -> None:
    orphan, later = backlog(conn)
    reap_at = T0 + timedelta(minutes=2)
    with psycopg.connect(conn.info.dsn, autocommit=True) as c:
        store = PgJobStore(c)
        assert store.reap(10, reap_at) == [(orphan, "default", "retrying")]
        first = store.claim({"default": 1}, "w", LEASE, reap_at)
        rest = store.claim({"default": 10}, "w", LEASE, reap_at)
    assert [j.id for j in first] == [orphan]
    assert first[0].run_at == T0  # the run_at it was claimed with, not the reap time
    assert sorted(j.id for j in rest) == later


def test_a_released_job_is_claimed_before_the_backlog(conn: psycopg.Connection[Any]) -> None:
    orphan, later = backlog(conn)
    at = T0 + timedelta(seconds=5)
    with psycopg.connect(conn.info.dsn, autocommit=True) as c:
        store = PgJobStore(c)
        token = conn.execute("SELECT lease_token FROM jobs_all WHERE id = %s", (orphan,)).fetchone()
        assert token is not None
        assert store.release([(orphan, token[0])], "crashed", at) == [orphan]
        first = store.claim({"default": 1}, "w", LEASE, at)
    assert [j.id for j in first] == [orphan]
    assert len(later) == 5
