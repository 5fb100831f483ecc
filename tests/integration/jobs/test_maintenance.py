"""jobs.maintenance on a real database: retention by table and lease recovery, batch by batch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

import jobs
from jobs.maintenance import RescueConfig, RetentionConfig, clean, recover_leases
from jobs.store import PgJobStore

NOW = datetime(2026, 6, 30, 12, 0, tzinfo=UTC)


def finished(conn: psycopg.Connection[Any], status: str, age: timedelta, n: int) -> list[int]:
    ids = [r.id for r in jobs.enqueue_many(conn, [jobs.JobSpec("t", {}) for _ in range(n)])]
    conn.execute(
        "UPDATE jobs SET status = %s, completed_at = %s WHERE id = ANY(%s)",
        (status, NOW - age, ids),
    )
    return ids


def test_clean_deletes_in_batches_until_one_comes_back_short(conn: psycopg.Connection[Any]) -> None:
    old = finished(conn, "succeeded", timedelta(days=8), 12) + finished(
        conn, "cancelled", timedelta(days=8), 3
    )
    kept = finished(conn, "succeeded", timedelta(days=6, hours=23), 2)
    dead = finished(conn, "dead", timedelta(days=100), 2)
    conn.execute(
        "INSERT INTO job_effects (effect_key, job_id, recorded_at)"
        " SELECT 'e' || g, 1, %s - make_interval(days => g * 20) FROM generate_series(1, 3) AS g",
        (NOW,),
    )  # 20, 40 and 60 days old
    conn.commit()
    batches: list[tuple[str, int]] = []
    counts = clean(
        conn,
        RetentionConfig(batch_size=5),
        now=NOW,
        on_batch=lambda kind, n: batches.append((kind, n)),
    )
    assert counts == {"jobs": 15, "attempts": 0, "effects": 2, "outbox": 0}
    # The finished jobs in jobs (from before migration 0021), then job_history's default
    # partition (none there).
    assert [n for kind, n in batches if kind == "jobs"] == [5, 5, 5, 0, 0]
    assert [n for kind, n in batches if kind == "effects"] == [2]
    left = {r[0] for r in conn.execute("SELECT id FROM jobs_all").fetchall()}
    assert left == {*kept, *dead} and not left & set(old)
    assert conn.execute("SELECT effect_key FROM job_effects").fetchall() == [("e1",)]
    # Dead jobs only with a dead retention.
    counts = clean(conn, RetentionConfig(dead_retention=timedelta(days=99)), now=NOW)
    assert counts["jobs"] == 2
    assert {r[0] for r in conn.execute("SELECT id FROM jobs_all").fetchall()} == set(kept)


def test_clean_counts_ages_from_the_database_clock_by_default(
    conn: psycopg.Connection[Any],
) -> None:
    (old,) = finished(conn, "succeeded", timedelta(0), 1)
    (recent,) = finished(conn, "succeeded", timedelta(0), 1)
    conn.execute("UPDATE jobs SET completed_at = now() - interval '8 days' WHERE id = %s", (old,))
    conn.execute(
        "UPDATE jobs SET completed_at = now() - interval '6 days' WHERE id = %s", (recent,)
    )
    conn.commit()
    assert clean(conn)["jobs"] == 1
    assert [r[0] for r in conn.execute("SELECT id FROM jobs_all").fetchall()] == [recent]


def test_recover_leases_returns_every_expired_lease(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    ids = [jobs.enqueue(conn, "t", {}, now=NOW).id for _ in range(3)]
    conn.commit()
    with psycopg.connect(db_url, autocommit=True) as c:
        store = PgJobStore(c)
        claimed = store.claim({"default": 3}, "crashed", timedelta(seconds=30), NOW)
        leases = [(j.id, j.lease_token) for j in claimed]
        # They started (an unstarted lease would go back to 'pending').
        store.heartbeat(leases, timedelta(seconds=30), NOW, started=[j.id for j in claimed])
    batches: list[int] = []
    later = NOW + timedelta(minutes=1)
    config = RescueConfig(batch_size=2)
    assert recover_leases(conn, config, now=later, on_batch=lambda _k, n: batches.append(n)) == 3
    assert batches == [2, 1]
    assert {jobs.get_job(conn, i).status for i in ids} == {"retrying"}
    assert recover_leases(conn, config, now=later) == 0
